package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Flood sizes: requests kept in flight, and for how long.
const (
	floodInFlight = 1000
	floodFor      = 5 * time.Second
)

// 1 000 requests that make the worker hash passwords (invites, password
// and email changes), kept in flight for 5 s by one tenant, leave another
// tenant's key revocations as fast as ever (committed and announced, which
// is when every server applies them, within 1 s) and the worker's memory
// bounded (password work runs a few at a time and the rest is refused at
// once). Run with -v for the table in BENCHMARKS.md.
func TestPasswordFloodKeepsRevocationsFast(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	ctx := context.Background()
	cl := bus.NewClient(e.nc, 30*time.Second)
	const password = "correct horse battery"
	var flood, victim service.Written[service.TenantCreated]
	eventuallyOK(t, "worker serving", func() error {
		return bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "flood", OwnerEmail: "owner@flood.test", OwnerPassword: password}, &flood)
	})
	if err := bus.CallInto(ctx, cl, bus.OpTenantCreate, bus.TenantCreate{Name: "victim", OwnerEmail: "owner@victim.test", OwnerPassword: password}, &victim); err != nil {
		t.Fatal(err)
	}
	var owner service.UserRecord
	if err := bus.CallInto(ctx, cl, bus.OpUserSignIn, bus.SignIn{Email: "owner@flood.test", Password: password}, &owner); err != nil {
		t.Fatal(err)
	}
	const revocations = 20
	keys := make([]string, revocations)
	for i := range keys {
		var k service.Written[service.KeyCreated]
		if err := bus.CallInto(ctx, cl, bus.OpKeyCreate, service.KeyCreate{TenantID: victim.Result.Tenant.ID, Name: fmt.Sprintf("key %d", i), Tier: "pro"}, &k); err != nil {
			t.Fatal(err)
		}
		keys[i] = k.Result.Key.ID
	}

	// Servers apply a change when its announcement reaches them.
	var seenMu sync.Mutex
	seen := map[int64]time.Time{}
	sub, err := e.nc.Subscribe(bus.ChangesSubject, func(m *nats.Msg) {
		at := time.Now()
		var msg bus.ChangeMsg
		if json.Unmarshal(m.Data, &msg) != nil || len(msg.Changes) == 0 {
			return
		}
		seenMu.Lock()
		seen[msg.Changes[0].Version] = at
		seenMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// The flood: each goroutine keeps one request in flight.
	floodCtx, stop := context.WithTimeout(ctx, floodFor)
	defer stop()
	var ok, busy, refused, other atomic.Int64
	var otherErr atomic.Value
	var wg sync.WaitGroup
	for i := range floodInFlight {
		wg.Go(func() {
			for n := 0; floodCtx.Err() == nil; n++ {
				var err error
				switch i % 3 {
				case 0:
					var u tenants.User
					err = bus.CallInto(floodCtx, cl, bus.OpUserCreate, service.UserCreate{TenantID: flood.Result.Tenant.ID, Email: fmt.Sprintf("m%d-%d@flood.test", i, n), Password: "invited passphrase", Role: tenants.RoleMember}, &u)
				case 1:
					var w service.Written[service.UserRecord]
					err = bus.CallInto(floodCtx, cl, bus.OpUserPassword, bus.UserPassword{ID: owner.User.ID, Current: password, New: password}, &w)
				case 2:
					var w service.Written[service.UserRecord]
					err = bus.CallInto(floodCtx, cl, bus.OpUserEmail, bus.UserEmail{ID: owner.User.ID, Password: password, Email: fmt.Sprintf("o%d-%d@flood.test", i, n)}, &w)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case errs.Is(err, errs.Unavailable) && strings.Contains(errs.Message(err), "busy"),
					errs.Is(err, errs.RateLimited): // the tenant's config write limit
					busy.Add(1)
				case errs.Is(err, errs.Invalid):
					refused.Add(1) // a password change that met another's commit
				case floodCtx.Err() != nil:
				default:
					other.Add(1)
					otherErr.Store(err)
				}
			}
		})
	}

	// Memory and password work in flight, sampled while the flood runs.
	var peakHeap, peakWork atomic.Uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-floodCtx.Done():
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakHeap.Store(max(peakHeap.Load(), ms.HeapInuse))
			peakWork.Store(max(peakWork.Load(), uint64(e.w.store.PasswordWorkInFlight())))
		}
	}()

	// The other tenant's revocations, spread over the flood.
	var took []time.Duration
	time.Sleep(floodFor / (revocations + 2)) // the flood is under way
	for _, id := range keys {
		start := time.Now()
		var w service.Written[tenants.ConsumerKey]
		if err := bus.CallInto(ctx, cl, bus.OpKeyRevoke, bus.TenantScoped{TenantID: victim.Result.Tenant.ID, ID: id}, &w); err != nil {
			t.Fatalf("revoke during the flood: %v", err)
		}
		var at time.Time
		eventually(t, 10*time.Second, "revocation announced", func() bool {
			seenMu.Lock()
			defer seenMu.Unlock()
			at = seen[w.Version]
			return !at.IsZero()
		})
		took = append(took, at.Sub(start))
		time.Sleep(time.Until(start.Add(floodFor / (revocations + 2))))
	}
	wg.Wait()
	<-sampled

	slices.Sort(took)
	median, worst := took[len(took)/2], took[len(took)-1]
	t.Logf("password flood: %d requests in flight for %s (invites, password and email changes), %d slots, %d waiting at most, GOMAXPROCS %d",
		floodInFlight, floodFor, tenants.PasswordSlots, tenants.PasswordQueue, runtime.GOMAXPROCS(0))
	t.Logf("| %-40s | %12s |", "measure", "value")
	t.Logf("| %-40s | %12s |", strings.Repeat("-", 40), strings.Repeat("-", 12))
	t.Logf("| %-40s | %12d |", "hashing requests answered", ok.Load()+refused.Load())
	t.Logf("| %-40s | %12d |", "refused at once (busy)", busy.Load())
	t.Logf("| %-40s | %12d |", "password work in flight, peak", peakWork.Load())
	t.Logf("| %-40s | %12s |", "other tenant's revocation, median", median.Round(100*time.Microsecond))
	t.Logf("| %-40s | %12s |", "other tenant's revocation, worst of 20", worst.Round(100*time.Microsecond))
	t.Logf("| %-40s | %9.1f MiB |", "Go heap in use before", float64(before.HeapInuse)/(1<<20))
	t.Logf("| %-40s | %9.1f MiB |", "Go heap in use, peak", float64(peakHeap.Load())/(1<<20))
	if rss, ok := peakRSS(); ok {
		t.Logf("| %-40s | %9.1f MiB |", "process RSS, peak (VmHWM)", float64(rss)/(1<<20))
	}

	if n := other.Load(); n > 0 {
		t.Errorf("%d flood requests failed otherwise: %v", n, otherErr.Load())
	}
	if ok.Load() == 0 || busy.Load() == 0 {
		t.Errorf("the flood did not run into the bound: %d answered, %d busy", ok.Load(), busy.Load())
	}
	// 124-196 ms alone; up to 1.44 s in CI runs, with the race detector
	// and other packages' tests on the same two cores. Without the cap or
	// with hashing under the writer it was 4.8 s and 12.4 s.
	if worst > 2*time.Second {
		t.Errorf("a revocation took %s during the flood, want within 2 s", worst)
	}
	// Password work holds 19 MiB per slot; everything else the process
	// holds (NATS, SQLite, a thousand requests) stays well under this.
	if limit := uint64(tenants.PasswordSlots)*19<<20*2 + 192<<20; peakHeap.Load() > limit {
		t.Errorf("Go heap peaked at %d MiB, want at most %d MiB", peakHeap.Load()>>20, limit>>20)
	}
}

// peakRSS reads the process's peak resident set (Linux).
func peakRSS() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
