package main

// The flood scenario: what a flood of distinct denied callers costs on
// disk. It starts a real Sluice server in this process (embedded NATS and
// worker, a fresh data directory on loopback), makes a tenant whose policy
// denies every check (cost 2 against a capacity of 1: nothing is consumed,
// no state is written), sends -flood distinct IPs through
// /v1/check/batch, 1000 checks a request, within -flood-time, waits until
// the analytics API counts every one of them, and prints the data
// directory's growth and the analytics rows. It then stops the server and
// runs the worker's maintenance pass on the file as of later instants, to
// show the minute being folded to its top identities, rolled up into hours
// and days, deleted after retention, and the file shrinking.
//
//	go run ./cmd/sluice-bench -flood 1000000

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// floodStep is one row of the flood table.
type floodStep struct {
	name                  string
	dataDir, sqlite, nats int64
	minutes, hours, days  int64
	identities, others    int64
	allowed, denied       int64
}

func runFlood(ctx context.Context, cfg Config, out io.Writer) error {
	dir := cfg.FloodData
	if dir == "" {
		tmp, err := os.MkdirTemp("", "sluice-flood-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	sc := app.DefaultConfig()
	sc.Addr, sc.Data, sc.Node = "127.0.0.1:0", data, "flood"
	sc.OperatorToken = "op_" + rand.Text() + rand.Text()
	srv := app.NewMain(sc, log)
	srv.Out = io.Discard
	if err := srv.Run(ctx); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return srv.Close(cctx)
	}
	defer stop()
	base := "http://" + srv.Addr()
	hc := &http.Client{Timeout: 30 * time.Second}
	if err := waitReady(ctx, hc, base); err != nil {
		return err
	}
	sk, err := floodTenant(ctx, hc, base, sc.OperatorToken)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "flood: %d distinct IPs, all denied, through /v1/check/batch (1000 checks a request, %d clients), within %v; data in %s\n\n",
		cfg.Flood, cfg.Workers, cfg.FloodTime, data)

	// Let the setup's writes settle before the baseline.
	time.Sleep(3 * time.Second)
	dbPath := filepath.Join(data, "sluice.db")
	var steps []floodStep
	base0, err := measure(ctx, "before the flood", data, dbPath, true)
	if err != nil {
		return err
	}
	steps = append(steps, base0)

	// The data directory's largest size while the flood is sent and
	// counted, sampled every 100 ms: what the stream held in passing too.
	var peak atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for sampleCtx.Err() == nil {
			if n := dirBytes(data); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	started := time.Now()
	sent, allowed, errCount := sendFlood(ctx, hc, base, sk, cfg)
	took := time.Since(started)
	fmt.Fprintf(out, "sent %d checks in %v (%.0f checks/s): %d allowed, %d request errors\n",
		sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), allowed, errCount)

	// The worker has caught up once the analytics API counts every check.
	from := started.Add(-time.Minute).UTC().Truncate(time.Minute)
	var counted int64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		to := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Minute)
		counted, err = countDenied(ctx, hc, base, sk, from, to)
		if err == nil && counted >= int64(sent-allowed) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	caught := time.Since(started)
	stopSampling()
	sampler.Wait()
	fmt.Fprintf(out, "analytics API counts %d denied of %d sent (%v after the flood began)\n", counted, sent-allowed, caught.Round(time.Millisecond))
	fmt.Fprintf(out, "data directory at its largest meanwhile (sampled every 100 ms): %s, %s over the baseline\n\n", mib(peak.Load()), signedMiB(peak.Load()-base0.dataDir))
	st, err := measure(ctx, "flood counted (server running)", data, dbPath, true)
	if err != nil {
		return err
	}
	steps = append(steps, st)

	if err := stop(); err != nil {
		return fmt.Errorf("stop server: %w", err)
	}
	if st, err = measure(ctx, "server stopped", data, dbPath, true); err != nil {
		return err
	}
	steps = append(steps, st)

	// The worker's maintenance pass as of later instants.
	db, err := sqlitedb.Open(ctx, dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now()
	for _, later := range []struct {
		name string
		d    time.Duration
	}{
		{"maintenance +3 min (minute folded to top-K)", 3 * time.Minute},
		{"maintenance +4 d (minutes rolled into hours)", 4 * 24 * time.Hour},
		{"maintenance +36 d (hours rolled into days)", 36 * 24 * time.Hour},
		{"maintenance +402 d (days past retention)", 402 * 24 * time.Hour},
	} {
		if _, err := analytics.Maintain(ctx, db, analytics.Retention{}, now.Add(later.d), log); err != nil {
			return fmt.Errorf("%s: %w", later.name, err)
		}
		st, err := measure(ctx, later.name, data, dbPath, false)
		if err != nil {
			return err
		}
		steps = append(steps, st)
	}
	printFlood(out, steps)
	if counted != int64(sent-allowed) {
		return fmt.Errorf("the analytics API counted %d denials, %d were made", counted, sent-allowed)
	}
	return nil
}

func waitReady(ctx context.Context, hc *http.Client, base string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if resp, err := hc.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("server not ready within a minute")
}

func apiCall(ctx context.Context, hc *http.Client, method, u, token string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// floodTenant creates the tenant and its deny-everything policy and
// returns the service key.
func floodTenant(ctx context.Context, hc *http.Client, base, opToken string) (string, error) {
	var t struct {
		ServiceKey string `json:"service_key"`
	}
	err := apiCall(ctx, hc, http.MethodPost, base+"/v1/admin/tenants", opToken,
		map[string]string{"name": "flood", "owner_email": "owner@flood.test", "owner_password": "a long passphrase"}, &t)
	if err != nil {
		return "", err
	}
	policy := map[string]any{"name": "flood", "path": "/api/flood",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "1h"}}}
	if err := apiCall(ctx, hc, http.MethodPost, base+"/v1/policies", t.ServiceKey, policy, nil); err != nil {
		return "", err
	}
	return t.ServiceKey, nil
}

// sendFlood sends cfg.Flood checks from distinct IPs (10.0.0.0/8 counted
// up), cost 2, in batches of 1000, until all are sent or cfg.FloodTime
// has passed.
func sendFlood(ctx context.Context, hc *http.Client, base, sk string, cfg Config) (sent, allowed, errCount int) {
	ctx, cancel := context.WithTimeout(ctx, cfg.FloodTime)
	defer cancel()
	const batch = 1000
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			var body []byte
			for ctx.Err() == nil {
				first := next.Add(batch) - batch
				if first >= int64(cfg.Flood) {
					return
				}
				n := min(batch, cfg.Flood-int(first))
				body = append(body[:0], `{"checks":[`...)
				for i := range n {
					if i > 0 {
						body = append(body, ',')
					}
					ip := uint32(first) + uint32(i) + 1
					body = append(body, `{"path":"/api/flood","cost":2,"ip":"10.`...)
					body = strconv.AppendUint(body, uint64(ip>>16&0xff), 10)
					body = append(body, '.')
					body = strconv.AppendUint(body, uint64(ip>>8&0xff), 10)
					body = append(body, '.')
					body = strconv.AppendUint(body, uint64(ip&0xff), 10)
					body = append(body, `"}`...)
				}
				body = append(body, "]}"...)
				got, ok, err := send(hc, base+"/v1/check/batch", sk, body, true)
				mu.Lock()
				if err != nil {
					errCount++
				} else {
					sent += got
					allowed += ok
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sent, allowed, errCount
}

func countDenied(ctx context.Context, hc *http.Client, base, sk string, from, to time.Time) (int64, error) {
	q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "step": {"1m"}}
	var ts struct {
		Points []struct {
			Denied int64 `json:"denied"`
		} `json:"points"`
	}
	if err := apiCall(ctx, hc, http.MethodGet, base+"/v1/analytics/timeseries?"+q.Encode(), sk, nil, &ts); err != nil {
		return 0, err
	}
	var d int64
	for _, p := range ts.Points {
		d += p.Denied
	}
	return d, nil
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// measure reads sizes on disk and the analytics tables (read-only).
func measure(ctx context.Context, name, data, dbPath string, readOnly bool) (floodStep, error) {
	st := floodStep{name: name}
	err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // a file gone meanwhile
		}
		st.dataDir += fi.Size()
		switch {
		case strings.HasPrefix(filepath.Base(p), "sluice.db"):
			st.sqlite += fi.Size()
		case strings.Contains(p, string(filepath.Separator)+"nats"+string(filepath.Separator)):
			st.nats += fi.Size()
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	dsn := "file:" + dbPath + "?_busy_timeout=5000"
	if readOnly {
		dsn += "&mode=ro"
	}
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return st, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM counters),
		(SELECT count(*) FROM counter_rollups WHERE res = 60),
		(SELECT count(*) FROM counter_rollups WHERE res = 1440),
		(SELECT count(*) FROM (SELECT DISTINCT identity_kind, identity_id FROM counters WHERE identity_kind != 'others'
			UNION SELECT DISTINCT identity_kind, identity_id FROM counter_rollups WHERE identity_kind != 'others')),
		(SELECT COALESCE(SUM(denied), 0) FROM counters WHERE identity_kind = 'others') +
			(SELECT COALESCE(SUM(denied), 0) FROM counter_rollups WHERE identity_kind = 'others'),
		(SELECT COALESCE(SUM(allowed), 0) FROM counters) + (SELECT COALESCE(SUM(allowed), 0) FROM counter_rollups),
		(SELECT COALESCE(SUM(denied), 0) FROM counters) + (SELECT COALESCE(SUM(denied), 0) FROM counter_rollups)`).
		Scan(&st.minutes, &st.hours, &st.days, &st.identities, &st.others, &st.allowed, &st.denied)
	return st, err
}

func printFlood(w io.Writer, steps []floodStep) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tdata dir\tgrowth\tSQLite\tNATS store\tminute rows\thour rows\tday rows\tidentities\tdenied in others\tdenied total\t")
	base := steps[0].dataDir
	for _, s := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.name, mib(s.dataDir), signedMiB(s.dataDir-base),
			mib(s.sqlite), mib(s.nats), s.minutes, s.hours, s.days, s.identities, s.others, s.denied)
	}
	tw.Flush()
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

func signedMiB(n int64) string { return fmt.Sprintf("%+.2f MiB", float64(n)/(1<<20)) }
