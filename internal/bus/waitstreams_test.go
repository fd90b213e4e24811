package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WaitStreams retries until the streams are set up, never in silence: the
// first failure is logged at WARN, every failure is passed on (to move off
// a NATS node and to count it), and success after failures is logged too.
func TestWaitStreamsTellsOfEveryFailure(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	calls, failed := 0, 0
	ensure := func(context.Context, jetstream.JetStream) error {
		calls++
		if calls <= 3 {
			return errors.New("nats: no response from stream")
		}
		return nil
	}
	if err := WaitStreams(context.Background(), nil, ensure, log, func(error) { failed++ }); err != nil {
		t.Fatal(err)
	}
	if calls != 4 || failed != 3 {
		t.Fatalf("%d attempts, %d failures told, want 4 and 3", calls, failed)
	}
	out := logs.String()
	if strings.Count(out, `"level":"WARN","msg":"NATS streams not ready; retrying"`) != 1 || !strings.Contains(out, `"err":"nats: no response from stream"`) {
		t.Fatalf("want one warning naming the error (the next after %s), got:\n%s", streamWaitLog, out)
	}
	if !strings.Contains(out, `"msg":"NATS streams ready","attempts":4`) {
		t.Fatalf("want the success logged with its attempts, got:\n%s", out)
	}

	// A context that ends stops the wait with both errors.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := WaitStreams(ctx, nil, func(context.Context, jetstream.JetStream) error { return errors.New("down") }, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("err = %v, want the deadline and the last failure", err)
	}
}
