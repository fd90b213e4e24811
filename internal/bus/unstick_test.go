package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// After requests fail for the set time on a live connection, Unstick moves
// it to another server once, and not again until that time has passed once
// more; a success starts the count again.
func TestUnstickReconnectsOnce(t *testing.T) {
	u := NewUnstick(nil, 3*time.Second, nil)
	now := time.Unix(1_700_000_000, 0)
	var moves int
	u.now, u.reconnect = func() time.Time { return now }, func() error { moves++; return nil }
	at := func(d time.Duration) { now = time.Unix(1_700_000_000, 0).Add(d) }
	for _, s := range []struct {
		at    time.Duration
		ok    bool
		moves int
	}{
		{at: 0, moves: 0},
		{at: 2 * time.Second, moves: 0},
		{at: 3 * time.Second, moves: 1},
		{at: 4 * time.Second, moves: 1},
		// Failing on the next server too: it is given twice as long (6 s),
		// but at least SettleWait (10 s), as the majority may be electing.
		{at: 9 * time.Second, moves: 1},
		{at: 12900 * time.Millisecond, moves: 1},
		{at: 13 * time.Second, moves: 2},
		// Then four times as long (12 s), then eight (24 s), no more.
		{at: 24 * time.Second, moves: 2},
		{at: 25 * time.Second, moves: 3},
		{at: 48 * time.Second, moves: 3},
		{at: 49 * time.Second, moves: 4},
		{at: 72 * time.Second, moves: 4},
		{at: 73 * time.Second, moves: 5},
		// A success starts over: 3 s of failures move again.
		{at: 74 * time.Second, ok: true, moves: 5},
		{at: 75 * time.Second, moves: 5},
		{at: 77 * time.Second, moves: 5},
		{at: 78 * time.Second, moves: 6},
	} {
		at(s.at)
		if s.ok {
			u.OK()
		} else {
			u.Failed()
		}
		if moves != s.moves {
			t.Fatalf("at %v: %d reconnects, want %d", s.at, moves, s.moves)
		}
	}
}

// A node that does not answer a ping either is not left: the link is down,
// not the node's cluster, and a forced reconnect would only close the
// connection. Once it answers pings again (and JetStream still fails), the
// process moves.
func TestUnstickStaysWhenTheLinkIsDown(t *testing.T) {
	u := NewUnstick(nil, 3*time.Second, nil)
	now := time.Unix(1_700_000_000, 0)
	var moves, pings int
	pong := false
	u.now, u.reconnect = func() time.Time { return now }, func() error { moves++; return nil }
	u.answers = func(time.Duration) error {
		pings++
		if !pong {
			return errors.New("timeout")
		}
		return nil
	}
	for _, s := range []struct {
		at           time.Duration
		pong         bool
		moves, pings int
	}{
		{at: 0},
		{at: 3 * time.Second, pings: 1},                       // due: no pong, no move
		{at: 4 * time.Second, pings: 1},                       // not due again yet
		{at: 6 * time.Second, pings: 2},                       // due again 3 s later: still no pong
		{at: 9 * time.Second, pong: true, moves: 1, pings: 3}, // the node answers: it lost its cluster
	} {
		now, pong = time.Unix(1_700_000_000, 0).Add(s.at), s.pong
		u.Failed()
		if moves != s.moves || pings != s.pings {
			t.Fatalf("at %v: %d reconnects after %d pings, want %d after %d", s.at, moves, pings, s.moves, s.pings)
		}
	}
}

// Rounds nobody answered move a process only after SettleWait, longer
// than a majority's election: a node electing its leaders answers
// nothing for a while too. A request that failed otherwise in between
// brings back the short wait.
func TestUnstickWaitsOutElectionsOnUnansweredRounds(t *testing.T) {
	u := NewUnstick(nil, 3*time.Second, nil)
	now := time.Unix(1_700_000_000, 0)
	var moves int
	u.now, u.reconnect = func() time.Time { return now }, func() error { moves++; return nil }
	at := func(d time.Duration) { now = time.Unix(1_700_000_000, 0).Add(d) }
	for _, s := range []struct {
		at       time.Duration
		answered bool // a failure that got an answer (Failed), else Unanswered
		ok       bool
		moves    int
	}{
		{at: 0},
		{at: 3 * time.Second},            // After has passed, but nothing answered
		{at: 9 * time.Second},            // an election takes up to 9 s
		{at: 10 * time.Second, moves: 1}, // SettleWait: the node lost its cluster
		{at: 11 * time.Second, ok: true, moves: 1},
		{at: 12 * time.Second, moves: 1},
		{at: 13 * time.Second, answered: true, moves: 1},
		{at: 15 * time.Second, moves: 2}, // a failure with an answer: After (3 s) again
	} {
		at(s.at)
		switch {
		case s.ok:
			u.OK()
		case s.answered:
			u.Failed()
		default:
			u.Unanswered()
		}
		if moves != s.moves {
			t.Fatalf("at %v: %d reconnects, want %d", s.at, moves, s.moves)
		}
	}
}

// What a majority node answers while a stream elects its leader (nothing
// in time, no responders, JetStream unavailable) waits SettleWait before a
// move; any other failure moves after the set time.
func TestUnstickFailedWithTellsElectionsApart(t *testing.T) {
	for _, c := range []struct {
		err      error
		electing bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("renew: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence: 7"}, false},
		{jetstream.ErrKeyExists, false},
		{errors.New("the log ends before this database"), false},
	} {
		if got := Electing(c.err); got != c.electing {
			t.Errorf("Electing(%v) = %v, want %v", c.err, got, c.electing)
		}
		u := NewUnstick(nil, 3*time.Second, nil)
		now := time.Unix(1_700_000_000, 0)
		moves := 0
		u.now, u.reconnect = func() time.Time { return now }, func() error { moves++; return nil }
		u.FailedWith(c.err)
		now = now.Add(3 * time.Second)
		u.FailedWith(c.err)
		want := 1
		if c.electing {
			want = 0 // not before SettleWait
		}
		if moves != want {
			t.Errorf("%v: %d moves after 3 s, want %d", c.err, moves, want)
		}
	}
}
