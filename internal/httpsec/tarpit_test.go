package httpsec

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestTarpitHoldsOnlyPastTheFreeRefusals(t *testing.T) {
	p := &Tarpit{Free: 3, Window: time.Second, Max: 3 * time.Second, PerKey: 8, Total: 8, Keys: 16}
	now := time.Unix(1000, 0)
	for i := range 3 {
		if d := p.Hold(context.Background(), "t1", 0, now); d != 0 {
			t.Fatalf("refusal %d within the free ones held %s", i+1, d)
		}
	}
	if d := p.admit("t1", 10*time.Millisecond, now); d != time.Second {
		t.Fatalf("the fourth refusal with Retry-After 10ms: held %s, want 1s (the header's whole seconds)", d)
	}
	p.release("t1")
	if d := p.admit("t1", 1500*time.Millisecond, now); d != 2*time.Second {
		t.Fatalf("Retry-After 1.5s: held %s, want 2s", d)
	}
	p.release("t1")
	if d := p.admit("t1", time.Hour, now); d != 3*time.Second {
		t.Fatalf("a Retry-After past Max: held %s, want Max", d)
	}
	p.release("t1")
	if d := p.admit("t1", 0, now); d != 3*time.Second {
		t.Fatalf("no Retry-After: held %s, want Max", d)
	}
	p.release("t1")
	// Another key has its own free refusals; a new window starts afresh.
	if d := p.admit("t2", 0, now); d != 0 {
		t.Fatalf("another key's first refusal held %s", d)
	}
	if d := p.admit("t1", 0, now.Add(time.Second)); d != 0 {
		t.Fatalf("the first refusal of a new window held %s", d)
	}
	// Hold really waits.
	p2 := &Tarpit{Free: 0, Window: time.Second, Max: 30 * time.Millisecond, PerKey: 1, Total: 1, Keys: 1}
	start := time.Now()
	if d := p2.Hold(context.Background(), "k", 0, now); d != 30*time.Millisecond || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("Hold answered %s after %s, want 30ms", d, time.Since(start))
	}
	if held, total := p2.Stats(); held != 0 || total != 1 {
		t.Fatalf("Stats after one hold: %d held, %d in all", held, total)
	}
}

func TestTarpitBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	p := &Tarpit{Free: 0, Window: time.Second, Max: time.Hour, PerKey: 2, Total: 3, Keys: 2}
	// PerKey: a third answer held for one key is answered at once.
	if p.admit("a", 0, now) == 0 || p.admit("a", 0, now) == 0 {
		t.Fatal("the first two refusals past Free were not held")
	}
	if d := p.admit("a", 0, now); d != 0 {
		t.Fatalf("a third answer held at once for one key (PerKey 2): %s", d)
	}
	// Total: three in all.
	if p.admit("b", 0, now) == 0 {
		t.Fatal("another key's refusal was not held")
	}
	if d := p.admit("b", 0, now); d != 0 {
		t.Fatalf("a fourth answer held in all (Total 3): %s", d)
	}
	// Keys: a third key is not remembered, so not slowed.
	if d := p.admit("c", 0, now); d != 0 {
		t.Fatalf("a key past the table's bound was held: %s", d)
	}
	p.release("a")
	p.release("a")
	p.release("b")
	// Once their window passed and they hold nothing, old keys make room.
	later := now.Add(2 * time.Second)
	for range 70 {
		p.admit("c", 0, later)
	}
	if _, ok := p.keys["c"]; !ok || len(p.keys) > 2 {
		t.Fatalf("after a sweep the table holds %d keys (c: %v), want c among at most 2", len(p.keys), ok)
	}
}

func TestTarpitHoldEndsWithTheRequest(t *testing.T) {
	p := &Tarpit{Free: 0, Window: time.Second, Max: time.Hour, PerKey: 4, Total: 4, Keys: 4}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Hold(ctx, "k", 0, time.Now()) })
	for {
		if held, _ := p.Stats(); held == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	if held, _ := p.Stats(); held != 0 {
		t.Fatalf("%d answers still held after the request ended", held)
	}
	var nilPit *Tarpit
	if d := nilPit.Hold(context.Background(), "k", time.Second, time.Now()); d != 0 {
		t.Fatalf("a nil tarpit held %s", d)
	}
}
