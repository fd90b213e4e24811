package main

// The tenants scenario: whether one big tenant slows every other tenant's
// config changes down. It runs, in this process, a real embedded NATS, the
// real worker over a real SQLite file, and -servers engines (each with its
// own NATS connection, hydrated from the worker's snapshot as a server is).
// A big tenant is written straight into SQLite with -policies policies and
// -keys consumer keys (as the worker stores them; writing a million keys
// through the API would take hours), and a small tenant gets -revocations
// keys through the worker. Then each of the small tenant's keys is revoked
// through the worker, as the API does, and the time is taken from the
// request until every server answers invalid_key for the key:
//
//   - idle: nothing else happens;
//   - churn: meanwhile the big tenant creates keys as fast as the worker
//     takes them, so every server applies a change of the big tenant
//     between two of the small tenant's.
//
//	go run ./cmd/sluice-bench tenants -policies 10000 -keys 1000000

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker"
)

type tenantsBenchConfig struct {
	Policies    int
	Keys        int
	Servers     int
	Revocations int
	Keep        bool
}

type revokeRow struct {
	Phase          string
	N              int
	Median, P90    time.Duration
	Max            time.Duration
	Over1s         int
	BigChanges     int64 // the big tenant's changes applied meanwhile
	BigChangeMaxMS float64
}

func runTenantsBench(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg tenantsBenchConfig
	fs := flag.NewFlagSet("sluice-bench tenants", flag.ContinueOnError)
	fs.IntVar(&cfg.Policies, "policies", 10_000, "the big tenant's policies")
	fs.IntVar(&cfg.Keys, "keys", 1_000_000, "the big tenant's consumer keys")
	fs.IntVar(&cfg.Servers, "servers", 2, "servers (engines) that must each apply every change")
	fs.IntVar(&cfg.Revocations, "revocations", 20, "the small tenant's keys revoked in each phase")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the data directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case cfg.Policies < 1 || cfg.Policies > 100_000:
		return errors.New("-policies must be between 1 and 100000")
	case cfg.Keys < 1 || cfg.Keys > 10_000_000:
		return errors.New("-keys must be between 1 and 10000000")
	case cfg.Servers < 1 || cfg.Servers > 8:
		return errors.New("-servers must be between 1 and 8")
	case cfg.Revocations < 1 || cfg.Revocations > 1000:
		return errors.New("-revocations must be between 1 and 1000")
	}
	dir, err := os.MkdirTemp("", "sluice-tenants-bench-")
	if err != nil {
		return err
	}
	if cfg.Keep {
		fmt.Fprintf(stdout, "data under %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "sluice.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	st := tenants.NewStore(db)
	now := time.Now()
	big, _, _, err := st.Tenants().Create(ctx, "big", "owner@big.test", "big tenant passphrase", now)
	if err != nil {
		return err
	}
	small, _, _, err := st.Tenants().Create(ctx, "small", "owner@small.test", "small tenant passphrase", now)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := fillBigTenant(ctx, db, big.ID, cfg.Policies, cfg.Keys, now); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "big tenant written: %d policies, %d consumer keys in %s\n", cfg.Policies, cfg.Keys, round(time.Since(start)))
	secrets := map[string]string{} // key id -> plain key, of the small tenant
	var smallKeys []string
	for i := range 2 * cfg.Revocations {
		k, plain, _, err := st.Keys().Create(ctx, small.ID, fmt.Sprint("k", i), "pro", nil, nil, now)
		if err != nil {
			return err
		}
		secrets[k.ID] = plain
		smallKeys = append(smallKeys, k.ID)
	}
	smallPolicy := tenants.Policy{Name: "api", Path: "/api/*", Tiers: map[string]tenants.Limits{"default": {{Algorithm: tenants.TokenBucket, Limit: 1000, Period: "1s"}}}}
	if _, _, err := st.Policies().Create(ctx, small.ID, smallPolicy, now); err != nil {
		return err
	}

	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir, Name: "tenants-bench"})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	connect := func() (*nats.Conn, error) { return nats.Connect(ns.ClientURL(), nats.InProcessServer(ns)) }
	wnc, err := connect()
	if err != nil {
		return err
	}
	defer wnc.Close()
	w, err := worker.New(worker.Config{Operator: worker.Operator{Out: io.Discard}, Caps: tenants.Caps{Policies: 2 * cfg.Policies, ConsumerKeys: 2 * cfg.Keys}}, db, wnc)
	if err != nil {
		return err
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { defer close(workerDone); _ = w.Run(wctx) }()
	defer func() { stopWorker(); <-workerDone }()

	var servers []*engine.Engine
	for i := range cfg.Servers {
		nc, err := connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		e, err := engine.New(engine.Config{Node: fmt.Sprint("bench", i)}, nc)
		if err != nil {
			return err
		}
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Minute)
		err = e.Start(sctx)
		scancel()
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			_ = e.Close(cctx)
		}()
		fmt.Fprintf(stdout, "server %d hydrated in %s\n", i, round(time.Since(start)))
		servers = append(servers, e)
	}
	client, err := connect()
	if err != nil {
		return err
	}
	defer client.Close()

	var rows []revokeRow
	for phase, churn := range []bool{false, true} {
		keys := smallKeys[phase*cfg.Revocations : (phase+1)*cfg.Revocations]
		r, err := revokePhase(ctx, client, servers, small.ID, big.ID, keys, secrets, churn)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(stdout, "\nthe small tenant's key revocations, from the request until all %d servers answer invalid_key; the big tenant holds %d policies and %d keys\n\n", cfg.Servers, cfg.Policies, cfg.Keys)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\trevocations\tmedian\tp90\tmax\tover 1 s\tbig tenant's changes meanwhile\tslowest big change\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%.0f ms\t\n", r.Phase, r.N, round(r.Median), round(r.P90), round(r.Max), r.Over1s, r.BigChanges, r.BigChangeMaxMS)
	}
	return tw.Flush()
}

// revokePhase revokes keys one after the other and times each until every
// server refuses it; with churn, the big tenant creates keys meanwhile.
func revokePhase(ctx context.Context, nc *nats.Conn, servers []*engine.Engine, smallID, bigID string, keys []string, secrets map[string]string, churn bool) (revokeRow, error) {
	row := revokeRow{Phase: "idle", N: len(keys)}
	var stop atomic.Bool
	var made atomic.Int64
	var slowest atomic.Int64
	var wg sync.WaitGroup
	if churn {
		row.Phase = "churn"
		wg.Go(func() {
			for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
				t := time.Now()
				var out service.Written[service.KeyCreated]
				err := bus.Request(ctx, nc, bus.OpKeyCreate.Subject(), service.KeyCreate{TenantID: bigID, Name: fmt.Sprint("churn", i), Tier: "pro"}, &out)
				if err != nil {
					continue
				}
				waitApplied(ctx, servers, out.Version)
				made.Add(1)
				if d := time.Since(t).Microseconds(); d > slowest.Load() {
					slowest.Store(d)
				}
			}
		})
		time.Sleep(time.Second) // let the churn start
	}
	var took []time.Duration
	for _, id := range keys {
		t := time.Now()
		var out service.Written[tenants.ConsumerKey]
		if err := bus.Request(ctx, nc, bus.OpKeyRevoke.Subject(), bus.TenantScoped{TenantID: smallID, ID: id}, &out); err != nil {
			stop.Store(true)
			wg.Wait()
			return row, fmt.Errorf("revoke %s: %w", id, err)
		}
		for !allRefuse(servers, smallID, secrets[id]) {
			if time.Since(t) > time.Minute {
				stop.Store(true)
				wg.Wait()
				return row, fmt.Errorf("revocation of %s not applied everywhere within a minute", id)
			}
			time.Sleep(200 * time.Microsecond)
		}
		took = append(took, time.Since(t))
	}
	stop.Store(true)
	wg.Wait()
	slices.Sort(took)
	row.Median, row.P90, row.Max = took[len(took)/2], took[len(took)*9/10], took[len(took)-1]
	for _, d := range took {
		if d > time.Second {
			row.Over1s++
		}
	}
	row.BigChanges = made.Load()
	row.BigChangeMaxMS = float64(slowest.Load()) / 1000
	return row, nil
}

func allRefuse(servers []*engine.Engine, tenantID, key string) bool {
	for _, e := range servers {
		a, err := e.Check(context.Background(), tenantID, &engine.CheckRequest{APIKey: key, Method: "GET", Path: "/api/x", Peek: true}, time.Now())
		if err != nil || a.Reason != engine.ReasonInvalidKey {
			return false
		}
	}
	return true
}

func waitApplied(ctx context.Context, servers []*engine.Engine, version int64) {
	for _, e := range servers {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		e.WaitVersion(wctx, version)
		cancel()
	}
}

// fillBigTenant writes policies and consumer keys of a tenant as the
// worker stores them, in one transaction.
func fillBigTenant(ctx context.Context, db *sql.DB, tenantID string, policies, keys int, now time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ms := now.UnixMilli()
	pst, err := tx.PrepareContext(ctx, `INSERT INTO policies (id, tenant_id, name, method, path, query, consistency, shadow, tiers, unlisted_tiers, created_at, updated_at)
		VALUES (?, ?, ?, 'GET', ?, '{}', 'exact', 0, ?, 'allow', ?, ?)`)
	if err != nil {
		return err
	}
	tiers, _ := json.Marshal(map[string]tenants.Limits{"default": {{Algorithm: tenants.TokenBucket, Limit: 100, Period: "60s"}}})
	for i := range policies {
		if _, err := pst.ExecContext(ctx, fmt.Sprintf("pol_big%07d", i), tenantID, fmt.Sprintf("p%d", i), fmt.Sprintf("/api/%d/:id", i), string(tiers), ms+int64(i), ms+int64(i)); err != nil {
			return err
		}
	}
	kst, err := tx.PrepareContext(ctx, `INSERT INTO consumer_keys (id, tenant_id, name, tier, prefix, hash, overrides, created_at, updated_at)
		VALUES (?, ?, ?, 'pro', ?, ?, '{}', ?, ?)`)
	if err != nil {
		return err
	}
	for i := range keys {
		plain := fmt.Sprintf("ck_big%032d", i)
		sum := sha256.Sum256([]byte(plain))
		if _, err := kst.ExecContext(ctx, fmt.Sprintf("ckey_big%08d", i), tenantID, fmt.Sprint("k", i), plain[:12], hex.EncodeToString(sum[:]), ms, ms); err != nil {
			return err
		}
	}
	return tx.Commit()
}
