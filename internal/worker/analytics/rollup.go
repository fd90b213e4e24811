// Package analytics is the worker's decision counters in SQLite: it applies
// the counter batches servers publish (ApplyCounters), keeps them bounded
// by folding and rolling them up (Maintainer), and answers the dashboard's
// and the API's queries over them (queries.go). It writes only inside the
// transactions and the writer the worker hands it; it never reads NATS and
// never touches the config tables.
package analytics

// Bounded analytics. Decision counters arrive per (tenant, policy, tier,
// identity, minute); left alone, every caller ever seen would add a row per
// minute forever, and a flood of distinct callers would grow the database
// as fast as it arrives. Three bounds keep storage proportional to tenants
// and time, never to callers:
//
//  1. Cardinality while a minute is open. A transaction of applyCounters
//     that would take a tenant's minute past OpenCellsPerK × TopK cells
//     merges its deltas with the minute's stored cells, keeps the
//     TopK identities with the most denials (then the most decisions)
//     exactly and folds every other identity into one "others" cell per
//     policy and tier (bus.CounterOthers). Totals are never touched: a
//     fold moves counts, it does not drop them.
//  2. Cardinality once a minute is closed. The maintenance pass folds each
//     closed minute down to its TopK identities plus "others".
//  3. Retention with roll-ups. Minute rows older than MinuteRows are summed
//     into hour rows (counter_rollups, res 60), hour rows older than
//     HourRows into day rows (res 1440), each period again keeping its TopK
//     identities plus "others"; day rows older than DayRows are deleted.
//     A roll-up of one tenant's period is one transaction that adds the
//     rows into the coarser period and deletes them, so every decision is
//     in exactly one row at any time and a query summing minute, hour and
//     day rows whose period starts in its range answers exact totals.
//
// Exactness of the top identities. On one server, an identity's count in a
// period is exact when it was counted in a cell of its own everywhere:
// the server kept it (its per-flush bound, internal/engine/counters.go,
// was not full when the identity first came in that flush), and it was
// among the TopK of every minute (and hour) the period was rolled up from.
// With fewer distinct identities than the bounds, the TopK are exact. With
// several servers, an identity's decisions are split over the servers that
// saw it, each bounding its own cells: its count is exact when every one
// of them kept it. Heavy callers come early in every flush and stay in
// every top, so they are the ones kept; the callers of a flood of new
// identities are the ones folded into "others".
//
// Space. Deleted rows free pages; the maintenance pass gives them back to
// the file system with sqlitedb.IncrementalVacuum, after the bucket sweep
// and the roll-ups have freed them.

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Retention bounds the analytics kept in SQLite. The zero value of each
// field means its default.
type Retention struct {
	// MinuteRows is how long per-minute rows are kept. Default 3 days.
	MinuteRows time.Duration
	// HourRows is how long per-hour rows are kept. Default 35 days.
	HourRows time.Duration
	// DayRows is how long per-day rows are kept. Default 400 days.
	DayRows time.Duration
	// TopK is how many identities per tenant each minute, hour and day
	// keeps exactly; the others are counted together. Default 100.
	TopK int
	// Audit is how long audit log entries are kept. Default 400 days.
	Audit time.Duration
	// Interval is how often roll-ups, retention and the vacuum run. Default 1m.
	Interval time.Duration
}

// DefaultAuditRetention is how long audit entries are kept unless
// --audit-retention says otherwise: over a year, so last year's change is
// still there at the yearly review.
const DefaultAuditRetention = 400 * 24 * time.Hour

// OpenCellsPerK × TopK is how many cells a tenant's open minute may hold
// before it is folded down to its TopK identities.
const OpenCellsPerK = 10

// vacuumMinFreePages is how many free pages (4 KiB each) the maintenance
// pass waits for before giving them back.
const vacuumMinFreePages = 256

// Defaults sets every zero field to its default.
func (r *Retention) Defaults() {
	if r.MinuteRows <= 0 {
		r.MinuteRows = 72 * time.Hour
	}
	if r.HourRows <= 0 {
		r.HourRows = 35 * 24 * time.Hour
	}
	if r.DayRows <= 0 {
		r.DayRows = 400 * 24 * time.Hour
	}
	if r.TopK <= 0 {
		r.TopK = 100
	}
	if r.Audit <= 0 {
		r.Audit = DefaultAuditRetention
	}
	if r.Interval <= 0 {
		r.Interval = time.Minute
	}
}

// Validate rejects retentions that would roll rows up before they are
// complete or keep coarse rows shorter than fine ones.
func (r Retention) Validate() error {
	r.Defaults()
	switch {
	case r.MinuteRows < time.Hour:
		return fmt.Errorf("--analytics-minutes must be at least 1h, not %s", r.MinuteRows)
	case r.HourRows < r.MinuteRows || r.HourRows < 24*time.Hour:
		return fmt.Errorf("--analytics-hours must be at least 1d and at least --analytics-minutes, not %s", r.HourRows)
	case r.DayRows < r.HourRows:
		return fmt.Errorf("--analytics-days must be at least --analytics-hours, not %s", r.DayRows)
	case r.Audit < 24*time.Hour:
		return fmt.Errorf("--audit-retention must be at least 1d, not %s", r.Audit)
	case r.TopK > 100000:
		return fmt.Errorf("--analytics-top-k must be at most 100000, not %d", r.TopK)
	}
	return nil
}

// RegisterFlags adds the retention flags to fs, with SLUICE_* environment
// twins read through getenv (the flag wins). cmd/worker and cmd/server
// (for its embedded worker) share them.
func (r *Retention) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) error {
	r.Defaults()
	var errs []error
	dur := func(name, env string, p *time.Duration, usage string) {
		if v := getenv(env); v != "" {
			d, err := parseDays(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			} else {
				*p = d
			}
		}
		fs.Func(name, fmt.Sprintf("%s (default %s) (%s)", usage, formatDays(*p), env), func(s string) error {
			d, err := parseDays(s)
			if err == nil {
				*p = d
			}
			return err
		})
	}
	dur("analytics-minutes", "SLUICE_ANALYTICS_MINUTES", &r.MinuteRows, "how long per-minute analytics rows are kept before they are rolled up into hours, e.g. 72h or 3d")
	dur("analytics-hours", "SLUICE_ANALYTICS_HOURS", &r.HourRows, "how long per-hour analytics rows are kept before they are rolled up into days")
	dur("analytics-days", "SLUICE_ANALYTICS_DAYS", &r.DayRows, "how long per-day analytics rows are kept before they are deleted")
	dur("audit-retention", "SLUICE_AUDIT_RETENTION", &r.Audit, "how long audit log entries (config changes) are kept before they are deleted")
	if v := getenv("SLUICE_ANALYTICS_TOP_K"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("SLUICE_ANALYTICS_TOP_K: want a positive integer, not %q", v))
		} else {
			r.TopK = n
		}
	}
	fs.IntVar(&r.TopK, "analytics-top-k", r.TopK, "identities per tenant each minute, hour and day keeps exactly; the rest count as \"others\" (SLUICE_ANALYTICS_TOP_K)")
	return errors.Join(errs...)
}

// parseDays reads a Go duration or a whole number of days ("30d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.Atoi(n)
		if err != nil || d < 1 {
			return 0, fmt.Errorf("%q: want a duration such as 72h or a number of days such as 30d", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a duration such as 72h or a number of days such as 30d", s)
	}
	return d, nil
}

func formatDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// cellKey names one counter row within a tenant's period.
type cellKey struct{ policy, tier, kind, id string }

// cellVal is one counter row's counts and the minutes its identity was
// first and last counted in. denied is every denial; rl, ik and bl split it
// by reason (rate_limited, invalid_key, blocked), except for denials
// counted before reasons were (migration 0006); cl counts the
// concurrency_limited ones (0 before migration 0027). units is what the
// decisions consumed (usage), 0 before migration 0024.
type cellVal struct{ allowed, denied, first, last, rl, ik, bl, cl, units int64 }

// cells is one tenant's period: a minute, an hour or a day.
type cells map[cellKey]*cellVal

func (c cells) add(k cellKey, v cellVal) {
	cur := c[k]
	if cur == nil {
		c[k] = &v
		return
	}
	cur.allowed += v.allowed
	cur.denied += v.denied
	cur.rl += v.rl
	cur.ik += v.ik
	cur.bl += v.bl
	cur.cl += v.cl
	cur.units += v.units
	cur.first = min(cur.first, v.first)
	cur.last = max(cur.last, v.last)
}

func (c cells) identities() int {
	seen := map[[2]string]struct{}{}
	for k := range c {
		if k.kind != bus.CounterOthers {
			seen[[2]string{k.kind, k.id}] = struct{}{}
		}
	}
	return len(seen)
}

// fold keeps the cells of the k identities with the most denials (then the
// most decisions, then by name, so that the choice is deterministic) and
// adds every other identity's cells into the "others" cell of their policy
// and tier. It reports whether anything was folded. Totals per policy and
// tier are the same before and after.
func fold(c cells, k int) (cells, bool) {
	type total struct {
		kind, id        string
		allowed, denied int64
	}
	byID := map[[2]string]*total{}
	for key, v := range c {
		if key.kind == bus.CounterOthers {
			continue
		}
		t := byID[[2]string{key.kind, key.id}]
		if t == nil {
			t = &total{kind: key.kind, id: key.id}
			byID[[2]string{key.kind, key.id}] = t
		}
		t.allowed += v.allowed
		t.denied += v.denied
	}
	if len(byID) <= k {
		return c, false
	}
	ranked := make([]*total, 0, len(byID))
	for _, t := range byID {
		ranked = append(ranked, t)
	}
	slices.SortFunc(ranked, func(a, b *total) int {
		switch {
		case a.denied != b.denied:
			return cmpDesc(a.denied, b.denied)
		case a.allowed+a.denied != b.allowed+b.denied:
			return cmpDesc(a.allowed+a.denied, b.allowed+b.denied)
		case a.kind != b.kind:
			return strings.Compare(a.kind, b.kind)
		}
		return strings.Compare(a.id, b.id)
	})
	keep := make(map[[2]string]bool, k)
	for _, t := range ranked[:k] {
		keep[[2]string{t.kind, t.id}] = true
	}
	out := make(cells, k+8)
	for key, v := range c {
		if key.kind != bus.CounterOthers && !keep[[2]string{key.kind, key.id}] {
			key.kind, key.id = bus.CounterOthers, ""
		}
		out.add(key, *v)
	}
	return out, true
}

func cmpDesc(a, b int64) int {
	if a > b {
		return -1
	}
	if a < b {
		return 1
	}
	return 0
}

// tenantMinute names one tenant's minute.
type tenantMinute struct {
	tenant string
	minute int64
}

// ApplyCounters adds the batches' counter deltas within tx, summed per cell
// first so a cell is written once per transaction, and keeps each tenant's
// open minute within OpenCellsPerK × topK cells (see the top of this file).
// It answers how many cells it wrote.
func ApplyCounters(tx *sql.Tx, batches []*bus.CounterBatch, topK int) (int, error) {
	groups := map[tenantMinute]cells{}
	var order []tenantMinute
	for _, b := range batches {
		for _, r := range b.Rows {
			if r.Allowed == 0 && r.Denied == 0 && r.Units == 0 {
				continue
			}
			tm := tenantMinute{r.TenantID, r.Minute}
			g := groups[tm]
			if g == nil {
				g = cells{}
				groups[tm] = g
				order = append(order, tm)
			}
			g.add(cellKey{r.Policy, r.Tier, r.IdentityKind, r.IdentityID}, cellVal{allowed: r.Allowed, denied: r.Denied, first: r.Minute, last: r.Minute, rl: r.RateLimited, ik: r.InvalidKey, bl: r.Blocked, cl: r.ConcurrencyLimited, units: r.Units})
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	m := sqlitedb.NewMultiRow(tx, `INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, units) VALUES`, 13,
		`ON CONFLICT (tenant_id, minute, policy, tier, identity_kind, identity_id)
		DO UPDATE SET allowed = allowed + excluded.allowed, denied = denied + excluded.denied,
			rate_limited = rate_limited + excluded.rate_limited, invalid_key = invalid_key + excluded.invalid_key, blocked = blocked + excluded.blocked,
			concurrency_limited = concurrency_limited + excluded.concurrency_limited, units = units + excluded.units`)
	written := 0
	for _, tm := range order {
		in := groups[tm]
		var stored int
		if err := tx.QueryRow(`SELECT count(*) FROM counters WHERE tenant_id = ? AND minute = ?`, tm.tenant, tm.minute).Scan(&stored); err != nil {
			return 0, err
		}
		if stored+len(in) > OpenCellsPerK*topK {
			// Over the bound: merge with what is stored and fold.
			all, err := loadMinute(tx, tm)
			if err != nil {
				return 0, err
			}
			for k, v := range in {
				all.add(k, *v)
			}
			in, _ = fold(all, topK)
			if _, err := tx.Exec(`DELETE FROM counters WHERE tenant_id = ? AND minute = ?`, tm.tenant, tm.minute); err != nil {
				return 0, err
			}
		}
		for k, v := range in {
			if err := m.Add(tm.tenant, tm.minute, k.policy, k.tier, k.kind, k.id, v.allowed, v.denied, v.rl, v.ik, v.bl, v.cl, v.units); err != nil {
				return 0, err
			}
		}
		// The next minute's row count reads what this one wrote.
		if err := m.Flush(); err != nil {
			return 0, err
		}
		written += len(in)
	}
	return written, nil
}

func loadMinute(tx *sql.Tx, tm tenantMinute) (cells, error) {
	rows, err := tx.Query(`SELECT policy, tier, identity_kind, identity_id, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counters
		WHERE tenant_id = ? AND minute = ?`, tm.tenant, tm.minute)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := cells{}
	for rows.Next() {
		var k cellKey
		v := cellVal{first: tm.minute, last: tm.minute}
		if err := rows.Scan(&k.policy, &k.tier, &k.kind, &k.id, &v.allowed, &v.denied, &v.rl, &v.ik, &v.bl, &v.cl, &v.units); err != nil {
			return nil, err
		}
		out.add(k, v)
	}
	return out, rows.Err()
}

// MaintenanceStats says what one maintenance pass did.
type MaintenanceStats struct {
	MinutesFolded  int   // closed tenant-minutes folded to their top identities
	MinuteRowsUp   int64 // minute rows rolled up into hours
	HourRowsUp     int64 // hour rows rolled up into days
	DayRowsDeleted int64 // day rows past retention
	AuditDeleted   int64 // audit log entries past retention
	FreedPages     int64 // pages given back to the file system
	PageSize       int64
}

// Maintainer runs the maintenance pass, the worker's every
// Retention.Interval; compactedTo is the first minute not yet folded after
// closing.
type Maintainer struct {
	db *sql.DB // reads; writes go through write and exclusive
	// write runs one write transaction, exclusive one non-transactional
	// write, each as the process's only SQLite writer (the worker's
	// store.WriteTx and store.Exclusive).
	write     func(ctx context.Context, fn func(*sql.Tx) error) error
	exclusive func(ctx context.Context, fn func() error) error
	// pruneAudit deletes audit entries older than a time (the store's
	// AuditLog.Prune), in transactions of at most batch rows.
	pruneAudit  func(ctx context.Context, cut time.Time, batch int) (int64, error)
	r           Retention
	log         *slog.Logger
	compactedTo int64
}

// Maintain runs one maintenance pass over db as of now: it folds closed
// minutes, rolls up and deletes rows past their retention, and gives freed
// pages back. The worker runs it every Retention.Interval; it is exported
// for tools that inspect a database (cmd/sluice-bench).
func Maintain(ctx context.Context, db *sql.DB, r Retention, now time.Time, log *slog.Logger) (MaintenanceStats, error) {
	r.Defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return NewMaintainer(db, tenants.NewStore(db), r, now, log).Run(ctx, now)
}

// NewMaintainer returns the maintenance of db, written through st (the
// process's only SQLite writer), starting as of now.
func NewMaintainer(db *sql.DB, st *tenants.Store, r Retention, now time.Time, log *slog.Logger) *Maintainer {
	r.Defaults()
	return &Maintainer{db: db, write: st.WriteTx, exclusive: st.Exclusive, pruneAudit: st.Audit().Prune, r: r, log: log,
		compactedTo: now.Unix()/60 - int64(r.MinuteRows/time.Minute)}
}

// closedAfter is how many minutes after its end a minute counts as closed:
// servers flush counters every second and the worker applies them within
// one more, so a minute gets nothing new after that unless NATS was away.
const closedAfter = 2

// Run runs one maintenance pass as of now.
func (m *Maintainer) Run(ctx context.Context, now time.Time) (MaintenanceStats, error) {
	var st MaintenanceStats
	nowMin := now.Unix() / 60
	n, err := m.foldClosed(ctx, nowMin)
	st.MinutesFolded = n
	if err != nil {
		return st, fmt.Errorf("fold closed minutes: %w", err)
	}
	minuteCut := floorTo(nowMin-int64(m.r.MinuteRows/time.Minute), 60)
	if st.MinuteRowsUp, err = m.rollUp(ctx, 1, 60, minuteCut); err != nil {
		return st, fmt.Errorf("roll minutes up into hours: %w", err)
	}
	hourCut := floorTo(nowMin-int64(m.r.HourRows/time.Minute), 1440)
	if st.HourRowsUp, err = m.rollUp(ctx, 60, 1440, hourCut); err != nil {
		return st, fmt.Errorf("roll hours up into days: %w", err)
	}
	// A day row goes once the whole day is older than DayRows.
	dayCut := nowMin - int64(m.r.DayRows/time.Minute) - 1440
	for {
		var n int64
		err := m.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM counter_rollups WHERE rowid IN
				(SELECT rowid FROM counter_rollups WHERE res = 1440 AND start < ? LIMIT 5000)`, dayCut)
			if err == nil {
				n, _ = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return st, fmt.Errorf("delete day rows past retention: %w", err)
		}
		st.DayRowsDeleted += n
		if n < 5000 {
			break
		}
	}
	if st.AuditDeleted, err = m.pruneAudit(ctx, now.Add(-m.r.Audit), 5000); err != nil {
		return st, fmt.Errorf("delete audit entries past retention: %w", err)
	}
	var vs sqlitedb.VacuumStats
	err = m.exclusive(ctx, func() (err error) {
		vs, err = sqlitedb.IncrementalVacuum(ctx, m.db, vacuumMinFreePages)
		return err
	})
	st.FreedPages, st.PageSize = vs.FreedPages, vs.PageSize
	if err != nil {
		return st, fmt.Errorf("incremental vacuum: %w", err)
	}
	if st.MinutesFolded+int(st.MinuteRowsUp+st.HourRowsUp+st.DayRowsDeleted+st.AuditDeleted+st.FreedPages) > 0 {
		m.log.Info("analytics maintenance", "minutes_folded", st.MinutesFolded, "minute_rows_rolled_up", st.MinuteRowsUp,
			"hour_rows_rolled_up", st.HourRowsUp, "day_rows_deleted", st.DayRowsDeleted, "audit_entries_deleted", st.AuditDeleted,
			"bytes_freed", st.FreedPages*st.PageSize)
	}
	return st, nil
}

func floorTo(minute, res int64) int64 {
	if minute < 0 {
		return 0
	}
	return minute - minute%res
}

// foldClosed folds every closed minute since the last pass (and the hour
// before it, for counters that came late) that holds more than TopK
// identities.
func (m *Maintainer) foldClosed(ctx context.Context, nowMin int64) (int, error) {
	from, to := m.compactedTo-60, nowMin-closedAfter
	if to <= from {
		return 0, nil
	}
	rows, err := m.db.QueryContext(ctx, `SELECT tenant_id, minute FROM counters WHERE minute >= ? AND minute < ?
		GROUP BY tenant_id, minute HAVING count(*) > ?`, from, to, m.r.TopK)
	if err != nil {
		return 0, err
	}
	var todo []tenantMinute
	for rows.Next() {
		var tm tenantMinute
		if err := rows.Scan(&tm.tenant, &tm.minute); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, tm)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	folded := 0
	for _, tm := range todo {
		done, err := m.foldMinute(ctx, tm)
		if err != nil {
			return folded, err
		}
		if done {
			folded++
		}
	}
	m.compactedTo = to
	return folded, nil
}

func (m *Maintainer) foldMinute(ctx context.Context, tm tenantMinute) (changed bool, err error) {
	err = m.write(ctx, func(tx *sql.Tx) error {
		c, err := loadMinute(tx, tm)
		if err != nil {
			return err
		}
		var out cells
		if out, changed = fold(c, m.r.TopK); !changed {
			return nil
		}
		if _, err := tx.Exec(`DELETE FROM counters WHERE tenant_id = ? AND minute = ?`, tm.tenant, tm.minute); err != nil {
			return err
		}
		st, err := tx.Prepare(`INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, units)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for k, v := range out {
			if _, err := st.Exec(tm.tenant, tm.minute, k.policy, k.tier, k.kind, k.id, v.allowed, v.denied, v.rl, v.ik, v.bl, v.cl, v.units); err != nil {
				return err
			}
		}
		return nil
	})
	return changed && err == nil, err
}

// rollUp moves every row of resolution from (1: the counters table) whose
// period starts before cut into rows of resolution to, one tenant's period
// per transaction, and returns how many rows it moved.
func (m *Maintainer) rollUp(ctx context.Context, from, to, cut int64) (int64, error) {
	var moved int64
	for ctx.Err() == nil {
		var q string
		var args []any
		if from == 1 {
			q, args = `SELECT DISTINCT tenant_id, minute - minute % ? FROM counters WHERE minute < ? LIMIT 100`, []any{to, cut}
		} else {
			q, args = `SELECT DISTINCT tenant_id, start - start % ? FROM counter_rollups WHERE res = ? AND start < ? LIMIT 100`, []any{to, from, cut}
		}
		rows, err := m.db.QueryContext(ctx, q, args...)
		if err != nil {
			return moved, err
		}
		var todo []tenantMinute
		for rows.Next() {
			var tm tenantMinute
			if err := rows.Scan(&tm.tenant, &tm.minute); err != nil {
				rows.Close()
				return moved, err
			}
			todo = append(todo, tm)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return moved, err
		}
		if len(todo) == 0 {
			break
		}
		for _, tm := range todo {
			n, err := m.rollUpPeriod(ctx, from, to, tm)
			if err != nil {
				return moved, err
			}
			moved += n
		}
	}
	return moved, ctx.Err()
}

// rollUpPeriod adds one tenant's rows of resolution from within the period
// of resolution to starting at p.minute into that period's row set, folds
// it to its TopK identities, and deletes the rows it took, in one
// transaction.
func (m *Maintainer) rollUpPeriod(ctx context.Context, from, to int64, p tenantMinute) (moved int64, err error) {
	err = m.write(ctx, func(tx *sql.Tx) error {
		n, err := rollUpPeriodTx(tx, from, to, p, m.r.TopK)
		moved = n
		return err
	})
	if err != nil {
		return 0, err
	}
	return moved, nil
}

func rollUpPeriodTx(tx *sql.Tx, from, to int64, p tenantMinute, topK int) (int64, error) {
	c, err := loadRollup(tx, p.tenant, to, p.minute)
	if err != nil {
		return 0, err
	}
	var rows *sql.Rows
	if from == 1 {
		rows, err = tx.Query(`SELECT policy, tier, identity_kind, identity_id, allowed, denied, minute, minute, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counters
			WHERE tenant_id = ? AND minute >= ? AND minute < ?`, p.tenant, p.minute, p.minute+to)
	} else {
		rows, err = tx.Query(`SELECT policy, tier, identity_kind, identity_id, allowed, denied, first_minute, last_minute, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counter_rollups
			WHERE tenant_id = ? AND res = ? AND start >= ? AND start < ?`, p.tenant, from, p.minute, p.minute+to)
	}
	if err != nil {
		return 0, err
	}
	var n int64
	for rows.Next() {
		var k cellKey
		var v cellVal
		if err := rows.Scan(&k.policy, &k.tier, &k.kind, &k.id, &v.allowed, &v.denied, &v.first, &v.last, &v.rl, &v.ik, &v.bl, &v.cl, &v.units); err != nil {
			rows.Close()
			return 0, err
		}
		c.add(k, v)
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	c, _ = fold(c, topK)
	if from == 1 {
		_, err = tx.Exec(`DELETE FROM counters WHERE tenant_id = ? AND minute >= ? AND minute < ?`, p.tenant, p.minute, p.minute+to)
	} else {
		_, err = tx.Exec(`DELETE FROM counter_rollups WHERE tenant_id = ? AND res = ? AND start >= ? AND start < ?`, p.tenant, from, p.minute, p.minute+to)
	}
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(`DELETE FROM counter_rollups WHERE tenant_id = ? AND res = ? AND start = ?`, p.tenant, to, p.minute); err != nil {
		return 0, err
	}
	ins, err := tx.Prepare(`INSERT INTO counter_rollups (tenant_id, res, start, policy, tier, identity_kind, identity_id, allowed, denied, first_minute, last_minute, rate_limited, invalid_key, blocked, concurrency_limited, units)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return 0, err
	}
	defer ins.Close()
	for k, v := range c {
		if _, err := ins.Exec(p.tenant, to, p.minute, k.policy, k.tier, k.kind, k.id, v.allowed, v.denied, v.first, v.last, v.rl, v.ik, v.bl, v.cl, v.units); err != nil {
			return 0, err
		}
	}
	return n, nil
}

func loadRollup(tx *sql.Tx, tenant string, res, start int64) (cells, error) {
	rows, err := tx.Query(`SELECT policy, tier, identity_kind, identity_id, allowed, denied, first_minute, last_minute, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counter_rollups
		WHERE tenant_id = ? AND res = ? AND start = ?`, tenant, res, start)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := cells{}
	for rows.Next() {
		var k cellKey
		var v cellVal
		if err := rows.Scan(&k.policy, &k.tier, &k.kind, &k.id, &v.allowed, &v.denied, &v.first, &v.last, &v.rl, &v.ik, &v.bl, &v.cl, &v.units); err != nil {
			return nil, err
		}
		out.add(k, v)
	}
	return out, rows.Err()
}
