package bus

// Replicas. Every stream and KV bucket Sluice makes is kept on Replicas
// NATS servers, so on a NATS cluster the loss of one node loses nothing that
// JetStream acknowledged. The setting (--nats-replicas, SLUICE_NATS_REPLICAS)
// is applied when a stream or bucket is made; one that already exists with
// fewer replicas is reported at start (a WARN), and the worker, whose role
// may update streams, raises it (NATS scales a stream's replicas in place).
// Servers may not update streams (ServerRole), so they only report.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplicasUsage is the help text of --nats-replicas, on server and worker.
const ReplicasUsage = "NATS servers that keep each stream and KV bucket Sluice makes: 1 to 5; 0 = 1 on a single NATS, the cluster's size up to 3 on a NATS cluster"

// ValidateReplicas checks a --nats-replicas value.
func ValidateReplicas(n int) error {
	if n < 0 || n > 5 {
		return fmt.Errorf("--nats-replicas must be between 0 (automatic) and 5, not %d", n)
	}
	return nil
}

// MaxAutoReplicas is the most replicas the automatic choice asks for: three
// survive the loss of one NATS node with a quorum left.
const MaxAutoReplicas = 3

// ResolveReplicas returns the replica count to ask for: want when it is set
// (> 0); otherwise 1 on a NATS that is not clustered, and on a cluster the
// number of NATS servers the connection knows of (the URLs it was given and
// those the cluster advertised), up to MaxAutoReplicas.
func ResolveReplicas(nc *nats.Conn, want int) int {
	if want > 0 {
		return want
	}
	if nc.ConnectedClusterName() == "" {
		return 1
	}
	return min(max(countServers(nc.Servers()), 1), MaxAutoReplicas)
}

// countServers counts distinct host:port pairs among NATS URLs.
func countServers(urls []string) int {
	seen := map[string]bool{}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			continue
		}
		seen[u.Host] = true
	}
	return len(seen)
}

// StreamReplicas reads how many replicas a stream has.
func StreamReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	return max(s.CachedInfo().Config.Replicas, 1), nil
}

// CheckReplicas logs a warning for each stream (a KV bucket's is "KV_" +
// its name) that exists with fewer than want replicas. It reports what it
// could not read as a warning too, and never fails: the process works with
// fewer replicas, it is only less safe.
func CheckReplicas(ctx context.Context, js jetstream.JetStream, want int, log *slog.Logger, streams ...string) {
	for _, name := range streams {
		have, err := StreamReplicas(ctx, js, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			log.Warn("could not read a stream's replicas", "stream", name, "err", err)
			continue
		}
		if have < want {
			log.Warn("stream has fewer replicas than asked: the loss of the NATS node holding it loses what it holds; cmd/worker raises it at start",
				"stream", name, "replicas", have, "want", want)
		}
	}
}

// RaiseReplicas updates each stream that exists with fewer than want
// replicas to want (the worker's role may; a server's may not). Streams are
// never lowered here. It returns the first error after trying them all.
func RaiseReplicas(ctx context.Context, js jetstream.JetStream, want int, log *slog.Logger, streams ...string) error {
	var errs []error
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		cfg := s.CachedInfo().Config
		have := max(cfg.Replicas, 1)
		if have >= want {
			continue
		}
		log.Warn("stream has fewer replicas than asked; raising them", "stream", name, "replicas", have, "want", want)
		cfg.Replicas = want
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			log.Warn("raising a stream's replicas failed; it keeps the ones it has", "stream", name, "replicas", have, "want", want, "err", err)
			errs = append(errs, fmt.Errorf("raise replicas of %s: %w", name, err))
			continue
		}
		log.Info("stream replicas raised", "stream", name, "replicas", want)
	}
	return errors.Join(errs...)
}

// KVStream is the stream behind a JetStream KV bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// SluiceStreams are every stream Sluice makes: the state and counter
// streams, the workers' replication log and the streams of its KV buckets.
func SluiceStreams() []string {
	return []string{StateStream, CounterStream, QuotaStream,
		KVStream(OwnersBucket), KVStream(MembersBucket), KVStream(RevokedSessionsBucket),
		ReplStream, KVStream(WorkerLeaseBucket)}
}
