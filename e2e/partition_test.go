package e2e

// Partitions and pauses, the way they happen: a server cut off from NATS
// and the other servers by a link that goes silent, the owner of most
// partitions stopped for seconds (SIGSTOP), a NATS node cut off from the
// other two, and every link slow and now and then late. Three NATS nodes,
// one worker and three servers (each in its own network namespace, or on
// loopback behind delay proxies) take 150 checks/s over 20 callers at 300
// per hour, exact; every answer is recorded and the history is checked
// (history_test.go): no caller admitted beyond limit + refill + the loss
// bound, no answer reporting more than an earlier one allows, every server
// agreeing after the heal, and SQLite agreeing after every process restarts.
//
// Each test prints its figures (windows without answers, recovery after the
// heal, admitted against the bound of the worst callers) for
// docs/GUARANTEES.md. Run them with: go test ./e2e -run TestPartition -v
// (and TestSlowLossyLink); the namespace tests need root.

import (
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// A server, the one owning the most partitions, cut off from NATS and from
// the other servers for 12 s (its bus link goes silent; its HTTP listener
// still takes checks), then healed.
func TestPartitionServerCutOff(t *testing.T) {
	fc := startLabCluster(t)
	tn, path, callers := fc.setup("cutoff")
	h := &history{}
	took := fc.drain(h, tn, path, callers, faultDrain)
	t.Logf("each caller took %d tokens in %s", faultDrain, took.Round(time.Millisecond))
	ld := fc.startLoad(h, tn, path, callers)
	time.Sleep(4 * time.Second)
	victim, n := fc.mostPartitions()
	rl := pollReady(victim.base, 100*time.Millisecond)
	cutAt := time.Now()
	fc.lab.cut(victim.host, netBus)
	t.Logf("cut %s (owner of %d of %d partitions) off from NATS and the other servers", victim.name, n, bus.Partitions)
	time.Sleep(12 * time.Second)
	healAt := time.Now()
	fc.lab.heal(victim.host, netBus)
	settle(h, healAt, 8*time.Second, 25*time.Second)
	ld.end()
	rl.end()
	answers := h.all()

	// Readiness of the cut server.
	notReady, saidNot := rl.first(cutAt, false)
	r200, n503 := rl.counts(cutAt, healAt)
	t.Logf("%s's /readyz during the cut: %d polls answered 200, %d not", victim.name, r200, n503)
	if !saidNot || notReady.After(healAt) {
		failf(t, "%s's /readyz never said not ready during the %s cut (polled every 100 ms)", victim.name, healAt.Sub(cutAt).Round(time.Second))
	} else {
		t.Logf("%s's /readyz said not ready %.1fs after the cut", victim.name, notReady.Sub(cutAt).Seconds())
		if notReady.Sub(cutAt) > 5*time.Second {
			failf(t, "%s's /readyz said not ready %.1fs after the cut, want within 5 s (a lease time)", victim.name, notReady.Sub(cutAt).Seconds())
		}
	}
	if ready, ok := rl.first(healAt, true); !ok {
		failf(t, "%s's /readyz did not say ready again after the heal", victim.name)
	} else {
		t.Logf("%s's /readyz said ready %.1fs after the heal", victim.name, ready.Sub(healAt).Seconds())
	}
	// The other servers answer every check again within 5 s of the cut:
	// the cut owner's leases end (2 s) and are taken over.
	for _, s := range fc.servers {
		if s == victim {
			continue
		}
		for _, w := range windowsOf(answers, s.name) {
			if w.From.Before(healAt) && w.To.Sub(cutAt) > 5*time.Second {
				failf(t, "%s: checks failed until %.1fs after the cut, want within 5 s", s.name, w.To.Sub(cutAt).Seconds())
			}
		}
	}
	checkRecovery(t, answers, fc, healAt, 10*time.Second)

	violations := historyViolations(answers)
	time.Sleep(time.Second) // the last flushes
	violations = append(violations, fc.agreement(h, tn, path, callers)...)
	violations = append(violations, fc.durability(h, tn, path, callers)...)
	report(t, cutAt, healAt, answers, violations)
	keepHistory(t, h.all())
}

// The server owning the most partitions stopped (SIGSTOP) for 10 s under
// load, then continued: the others take its partitions over meanwhile, and
// what it held and decided before the pause must not win over what they
// decided since.
func TestPartitionOwnerPaused(t *testing.T) {
	fc := startLabCluster(t)
	tn, path, callers := fc.setup("paused")
	h := &history{}
	fc.drain(h, tn, path, callers, faultDrain)
	ld := fc.startLoad(h, tn, path, callers)
	time.Sleep(4 * time.Second)
	victim, n := fc.mostPartitions()
	pausedAt := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused %s (owner of %d of %d partitions)", victim.name, n, bus.Partitions)
	time.Sleep(10 * time.Second)
	resumedAt := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	settle(h, resumedAt, 8*time.Second, 25*time.Second)
	ld.end()
	answers := h.all()

	for _, s := range fc.servers {
		if s == victim {
			continue
		}
		for _, w := range windowsOf(answers, s.name) {
			if w.From.Before(resumedAt) && w.To.Sub(pausedAt) > 5*time.Second {
				failf(t, "%s: checks failed until %.1fs after the pause began, want within 5 s", s.name, w.To.Sub(pausedAt).Seconds())
			}
		}
	}
	checkRecovery(t, answers, fc, resumedAt, 10*time.Second)

	violations := historyViolations(answers)
	time.Sleep(time.Second)
	violations = append(violations, fc.agreement(h, tn, path, callers)...)
	violations = append(violations, fc.durability(h, tn, path, callers)...)
	report(t, pausedAt, resumedAt, answers, violations)
	keepHistory(t, h.all())
}

// The NATS node that is the JetStream meta leader and leads the lease
// bucket, and that most of Sluice's processes are connected to, cut off
// from the other two NATS nodes (its route link goes silent) for 15 s; its
// clients can still reach it. They must move to the majority and every
// server answer checks again within 45 s of the cut (about 10 s measured).
func TestPartitionNATSMinority(t *testing.T) {
	fc := startLabCluster(t)
	tn, path, callers := fc.setup("minority")
	// The node most of Sluice's processes use.
	var victim *faultNATS
	var clients []string
	for _, n := range fc.nats {
		if c := sluiceClients(n); victim == nil || len(c) > len(clients) {
			victim, clients = n, c
		}
	}
	fc.moveLeaders(victim)
	fc.waitServing(30 * time.Second)
	clients = sluiceClients(victim)
	t.Logf("isolating %s: JetStream meta leader, leader of %s; Sluice's connections to it: %v",
		victim.spec.name, bus.KVStream(bus.OwnersBucket), clients)
	h := &history{}
	fc.drain(h, tn, path, callers, faultDrain)
	ld := fc.startLoad(h, tn, path, callers)
	time.Sleep(4 * time.Second)
	cutAt := time.Now()
	fc.lab.cut(victim.host, netRoute)
	time.Sleep(15 * time.Second)
	healAt := time.Now()
	fc.lab.heal(victim.host, netRoute)
	settle(h, healAt, 8*time.Second, 35*time.Second)
	ld.end()
	answers := h.all()

	// Every server decides again about 10 s after the cut: JetStream
	// elects new leaders on the majority in 4-9 s and the processes on the
	// isolated node move to it (2.5 s of failing requests for a server,
	// 10 s for the worker, whose requests there get no answer or no
	// responders, as on a majority node while it elects; each further
	// move waiting 10 s). Measured in
	// twelve runs, the worker on the isolated node in each: 4.0-13.3 s
	// (docs/GUARANTEES.md). Under the whole suite's load on two cores the
	// majority took up to 20 s to serve the worker's lease and log again
	// (20.5 and 22.6 s measured), and twice the worker, moved off a
	// majority node whose requests failed while it elected, landed on the
	// isolated node (30.3 and 34.5 s, then 15.3 and 19.5 s after the heal);
	// the test holds the documented bounds, 45 s and 25 s.
	for _, s := range fc.servers {
		for _, w := range windowsOf(answers, s.name) {
			if w.From.Before(healAt) && w.To.Sub(cutAt) > 45*time.Second {
				failf(t, "%s: checks failed until %.1fs after the cut, want every server answering within 45 s (moving to the majority)", s.name, w.To.Sub(cutAt).Seconds())
			}
		}
	}
	checkRecovery(t, answers, fc, healAt, 25*time.Second)

	violations := historyViolations(answers)
	time.Sleep(time.Second)
	violations = append(violations, fc.agreement(h, tn, path, callers)...)
	violations = append(violations, fc.durability(h, tn, path, callers)...)
	report(t, cutAt, healAt, answers, violations)
	keepHistory(t, h.all())
}

// Every link slow and now and then late: servers and the worker reach NATS,
// the NATS nodes each other and the servers each other through proxies that
// delay each chunk 50 ± 20 ms and one in 20 a further 200–300 ms. Every
// message arrives; under load almost no check may fail. The cluster starts
// on fast links and the links turn slow under load; after 5 s, 20 s are
// measured; then the links are fast again and the history is checked.
func TestSlowLossyLink(t *testing.T) {
	var slow atomic.Bool
	fc := startSlowCluster(t, &slow)
	tn, path, callers := fc.setup("slow")
	h := &history{}
	fc.drain(h, tn, path, callers, faultDrain)
	ld := fc.startLoad(h, tn, path, callers)
	time.Sleep(2 * time.Second)
	lostBefore := make([]int, len(fc.servers))
	for i, s := range fc.servers {
		lostBefore[i] = lost(s.server)
	}
	slowAt := time.Now()
	slow.Store(true)
	time.Sleep(5 * time.Second)
	from := time.Now()
	time.Sleep(20 * time.Second)
	to := time.Now()
	// No lease lapses on a quiet machine; under the whole suite's load (the
	// race detector on two cores) one lapsed once in a run. More than an
	// eighth of the 64 means renewals do not ride out the link.
	lapsed := 0
	for i, s := range fc.servers {
		lapsed += lost(s.server) - lostBefore[i]
	}
	t.Logf("partitions lost on the slow links: %d", lapsed)
	if lapsed > 8 {
		failf(t, "%d partitions lost on the slow links (leases lapsed), want at most 8", lapsed)
	}
	slow.Store(false) // the links heal
	settle(h, to, 3*time.Second, 15*time.Second)
	ld.end()
	answers := h.all()

	var total, failed int
	for _, a := range answers {
		if !a.Peek && !a.Start.Before(from) && a.Start.Before(to) {
			total++
			if !a.ok() {
				failed++
			}
		}
	}
	share := 0.0
	if total > 0 {
		share = float64(failed) / float64(total)
	}
	t.Logf("20 s of load on slow links, from 5 s after they turned slow: %d of %d checks not answered 200 (%.2f %%); %d not sent (too many in flight)", failed, total, 100*share, ld.skipped.Load())
	if total < int(faultRate*20*0.8) {
		failf(t, "only %d checks sent in 20 s, want about %d", total, int(faultRate*20))
	}
	// Leases must hold (no partition changes hands); what fails is the odd
	// forward to the owner that takes longer than the 2 s a check waits
	// for it (docs/GUARANTEES.md, "Partitions and pauses"): 2–3 % on a
	// quiet machine, up to 5 % with other tests running beside it. Before
	// the renewal changes, 92–100 % failed.
	if share >= 0.10 {
		failf(t, "%.2f %% of checks failed on slow links, want under 10 %%", 100*share)
	}
	violations := historyViolations(answers)
	time.Sleep(time.Second)
	violations = append(violations, fc.agreement(h, tn, path, callers)...)
	report(t, slowAt, to, answers, violations)
	keepHistory(t, h.all())
}

// checkRecovery fails the test unless every server answered every check
// again within d of the heal.
func checkRecovery(t *testing.T, answers []answer, fc *faultCluster, healAt time.Time, d time.Duration) {
	t.Helper()
	for _, s := range fc.servers {
		var last time.Time
		for _, w := range windowsOf(answers, s.name) {
			if w.To.After(last) {
				last = w.To
			}
		}
		if last.Sub(healAt) > d {
			failf(t, "%s: checks failed until %.1fs after the heal, want every check answered within %s", s.name, last.Sub(healAt).Seconds(), d)
		}
	}
}

// A server cut off for 12 s, as in TestPartitionServerCutOff, but the
// policy is "local": every server decides from its own cache and shares
// its consumption with the others over core NATS every 50 ms. The cut
// server keeps answering (no owner is needed); what it admits meanwhile
// is unheard by the others, and what they admit is unheard by it, so a
// caller may get up to one more bucket: the documented local-mode bound,
// limit × servers plus refill (docs/GUARANTEES.md), must hold.
func TestPartitionLocalMode(t *testing.T) {
	fc := startLabCluster(t)
	tn, path, callers := fc.setupWith("localmode", "local")
	h := &history{}
	fc.drain(h, tn, path, callers, faultDrain)
	ld := fc.startLoad(h, tn, path, callers)
	time.Sleep(4 * time.Second)
	victim := fc.servers[0]
	cutAt := time.Now()
	fc.lab.cut(victim.host, netBus)
	time.Sleep(12 * time.Second)
	healAt := time.Now()
	fc.lab.heal(victim.host, netBus)
	settle(h, healAt, 8*time.Second, 25*time.Second)
	ld.end()
	answers := h.all()

	var total, failed int
	for _, a := range answers {
		if a.Server == victim.name && !a.Peek && !a.Start.Before(cutAt) && a.Start.Before(healAt) {
			total++
			if !a.ok() {
				failed++
			}
		}
	}
	t.Logf("%s during its cut: %d of %d checks not answered 200", victim.name, failed, total)
	if total == 0 || failed*20 > total {
		failf(t, "%s answered %d of %d checks with an error during its cut, want under 5 %%: a local policy needs no owner", victim.name, failed, total)
	}
	// The bound: every server's whole bucket, plus refill.
	m := faultModel()
	m.Bound = int64(faultLimit * (len(fc.servers) - 1))
	vs, stats := checkAdmitted(answers, m)
	worst := 0
	for _, st := range stats {
		worst = max(worst, int(st.Admitted))
	}
	t.Logf("local mode, one server cut off 12 s: worst caller admitted %d (limit %d, documented bound %d + refill)", worst, faultLimit, faultLimit*len(fc.servers))
	reportModel(t, m, cutAt, healAt, answers, vs)
	keepHistory(t, h.all())
}
