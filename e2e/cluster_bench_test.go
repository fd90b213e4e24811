package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
)

// BenchmarkClusterCheck measures what forwarding adds to a check. Two
// servers, one worker and one NATS run as processes; checks go one at a
// time over keep-alive HTTP to s1, for identities whose partition s1 owns
// (decided in s1's memory) and for identities s2 owns (forwarded to s2 over
// NATS request/reply and answered back), and, for comparison, under a
// "local" policy that never forwards. Reports p50 and p99 per check.
//
//	go test ./e2e -run '^$' -bench BenchmarkClusterCheck -benchtime 5000x
func BenchmarkClusterCheck(b *testing.B) {
	tp := startTopology(b, 2, nil)
	s1 := tp.servers[0]
	tn := createTenant(b, s1, "bench")
	exactID := createPolicy(b, s1, tn, limitPolicy("exact", "exact", 1_000_000_000))
	createPolicy(b, s1, tn, limitPolicy("local", "local", 1_000_000_000))
	waitFor(b, 2*time.Second, "policies on s1", func() bool {
		c, err := tryCheck(s1, tn, map[string]any{"ip": "192.0.2.1", "path": "/local", "peek": true})
		return err == nil && c.Policy == "local"
	})

	owners := tp.partitionOwners()
	var mine, theirs []string
	for i := 0; len(mine) < 256 || len(theirs) < 256; i++ {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		switch owners[bus.Partition([]byte(tn.ID+"/"+exactID+"/ip:"+ip))] {
		case "s1":
			mine = append(mine, ip)
		case "s2":
			theirs = append(theirs, ip)
		}
	}
	mine, theirs = mine[:256], theirs[:256]

	for _, c := range []struct {
		name, path string
		ips        []string
	}{
		{"exact-owned", "/exact", mine},
		{"exact-forwarded", "/exact", theirs},
		{"local", "/local", theirs},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				r, err := tryCheck(s1, tn, map[string]any{"ip": c.ips[i%len(c.ips)], "path": c.path})
				if err != nil || !r.Allowed {
					b.Fatalf("check: %+v, %v", r, err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}

	// The transport's own floor: one NATS request/reply through the same
	// nats-server, between two connections, with a forward-sized payload.
	b.Run("nats-request-reply", func(b *testing.B) {
		resp, err := nats.Connect(tp.natsURL())
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Close()
		if _, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			b.Fatal(err)
		}
		resp.Flush()
		req, err := nats.Connect(tp.natsURL())
		if err != nil {
			b.Fatal(err)
		}
		defer req.Close()
		payload := make([]byte, 160)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := req.Request("bench.echo", payload, 2*time.Second); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	})
}
