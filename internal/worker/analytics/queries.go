package analytics

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/service"

	"github.com/sluicehq/sluice/internal/errs"
)

// Analytics queries over the counters table (minute rows) and
// counter_rollups (hour and day rows, see rollup.go). A row counts in a
// range, or a step, when its period starts in it, so a query spanning
// rolled-up and fresh rows sums every decision exactly once. Counts are
// exact for every decision whose counter batch the worker has committed;
// servers flush counters every second, so the newest second may not be in
// yet. Identities folded into "others" count in timeseries, never in top.

// Limits of analytics queries, documented in the API reference.
const (
	maxPoints = 10000
	maxTop    = 1000
)

func validRange(from, to time.Time) error {
	if from.IsZero() {
		return errs.Errorf(errs.Invalid, "from: required, an RFC 3339 time")
	}
	if to.IsZero() {
		return errs.Errorf(errs.Invalid, "to: required, an RFC 3339 time")
	}
	if !to.After(from) {
		return errs.Errorf(errs.Invalid, "to: must be after from")
	}
	return nil
}

// rangeMinutes is the minutes [from, to) a range covers: a row counts in
// it when its period (a minute, an hour or a day) starts in it.
func rangeMinutes(from, to time.Time) (fromMin, toMin int64) {
	return from.Unix() / 60, (to.Unix() + 59) / 60
}

func Timeseries(ctx context.Context, db *sql.DB, q service.TimeseriesQuery) (service.Timeseries, error) {
	if err := validRange(q.From, q.To); err != nil {
		return service.Timeseries{}, err
	}
	step, err := time.ParseDuration(q.Step)
	if q.Step == "" {
		step, err = time.Minute, nil
		q.Step = "1m"
	}
	if err != nil || step < time.Minute || step%time.Minute != 0 {
		return service.Timeseries{}, errs.Errorf(errs.Invalid, "step: must be a whole number of minutes such as \"1m\", \"5m\" or \"1h\"")
	}
	fromMin, toMin := rangeMinutes(q.From, q.To)
	stepMin := int64(step / time.Minute)
	n := (toMin - fromMin + stepMin - 1) / stepMin
	if n > maxPoints {
		return service.Timeseries{}, errs.Errorf(errs.Invalid, "step: the range would have %d points; at most %d are allowed", n, maxPoints)
	}
	// Minute rows and rolled-up rows alike count in the step their period
	// starts in.
	filter, fargs := "", []any{}
	if q.Policy != "" {
		filter += ` AND policy = ?`
		fargs = append(fargs, q.Policy)
	}
	if q.Identity != nil {
		filter += ` AND identity_kind = ? AND identity_id = ?`
		fargs = append(fargs, q.Identity.Kind, q.Identity.ID)
	}
	query := `SELECT (start - ?) / ?, SUM(allowed), SUM(denied), SUM(rate_limited), SUM(invalid_key), SUM(blocked), SUM(concurrency_limited), SUM(units) FROM (
			SELECT minute AS start, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counters
			WHERE tenant_id = ? AND minute >= ? AND minute < ?` + filter + `
			UNION ALL
			SELECT start, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, units FROM counter_rollups
			WHERE tenant_id = ? AND res IN (60, 1440) AND start >= ? AND start < ?` + filter + `
		) GROUP BY 1`
	args := []any{fromMin, stepMin, q.TenantID, fromMin, toMin}
	args = append(args, fargs...)
	args = append(args, q.TenantID, fromMin, toMin)
	args = append(args, fargs...)
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return service.Timeseries{}, err
	}
	defer rows.Close()
	points := make([]service.TimeseriesPoint, n)
	for i := range points {
		points[i].Start = time.Unix((fromMin+int64(i)*stepMin)*60, 0).UTC()
	}
	for rows.Next() {
		var idx, a, d, rl, ik, bl, cl, u int64
		if err := rows.Scan(&idx, &a, &d, &rl, &ik, &bl, &cl, &u); err != nil {
			return service.Timeseries{}, err
		}
		if idx >= 0 && idx < n {
			p := &points[idx]
			p.Allowed, p.Denied, p.RateLimited, p.InvalidKey, p.Blocked, p.ConcurrencyLimited, p.Units = a, d, rl, ik, bl, cl, u
		}
	}
	if err := rows.Err(); err != nil {
		return service.Timeseries{}, err
	}
	return service.Timeseries{From: q.From.UTC(), To: q.To.UTC(), Step: q.Step, Points: points}, nil
}

func Top(ctx context.Context, db *sql.DB, q service.TopQuery) ([]service.TopEntry, error) {
	if err := validRange(q.From, q.To); err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = 20
	}
	if q.Limit < 1 || q.Limit > maxTop {
		return nil, errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", maxTop)
	}
	rank := "c.denied"
	switch q.Reason {
	case "":
	case "rate_limited", "invalid_key", "blocked", "concurrency_limited":
		// A column name from this fixed list, never the caller's text.
		rank = "c." + q.Reason
	default:
		return nil, errs.Errorf(errs.Invalid, "reason: must be rate_limited, invalid_key, blocked or concurrency_limited")
	}
	fromMin, toMin := rangeMinutes(q.From, q.To)
	// The "others" cells are no identity: they count in totals only.
	filter, fargs := ` AND identity_kind != '`+bus.CounterOthers+`'`, []any{}
	if q.TenantID != "" {
		filter += ` AND tenant_id = ?`
		fargs = append(fargs, q.TenantID)
	}
	if q.Policy != "" {
		filter += ` AND policy = ?`
		fargs = append(fargs, q.Policy)
	}
	if q.Identity != nil {
		filter += ` AND identity_kind = ? AND identity_id = ?`
		fargs = append(fargs, q.Identity.Kind, q.Identity.ID)
	}
	if q.IdentityKind != "" {
		filter += ` AND identity_kind = ?`
		fargs = append(fargs, q.IdentityKind)
	}
	query := `SELECT c.tenant_id, COALESCE(t.name, ''), c.identity_kind, c.identity_id,
			SUM(c.allowed), SUM(c.denied), SUM(c.rate_limited), SUM(c.invalid_key), SUM(c.blocked), SUM(c.concurrency_limited), MIN(c.first), MAX(c.last)
		FROM (
			SELECT tenant_id, identity_kind, identity_id, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, minute AS first, minute AS last
			FROM counters WHERE minute >= ? AND minute < ?` + filter + `
			UNION ALL
			SELECT tenant_id, identity_kind, identity_id, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited, first_minute, last_minute
			FROM counter_rollups WHERE start >= ? AND start < ?` + filter + `
		) c LEFT JOIN tenants t ON t.id = c.tenant_id
		GROUP BY c.tenant_id, c.identity_kind, c.identity_id`
	args := []any{fromMin, toMin}
	args = append(args, fargs...)
	args = append(args, fromMin, toMin)
	args = append(args, fargs...)
	if !q.IncludeAllowed || q.Reason != "" {
		query += ` HAVING SUM(` + rank + `) > 0`
	} else {
		// A caller with units but no decision in the range (a settle's
		// alone) is no caller of it.
		query += ` HAVING SUM(c.allowed) + SUM(c.denied) > 0`
	}
	query += `
		ORDER BY SUM(` + rank + `) DESC, SUM(` + rank + `) * 1.0 / (SUM(c.allowed) + SUM(c.denied)) DESC, c.identity_id
		LIMIT ?`
	args = append(args, q.Limit)
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []service.TopEntry{}
	for rows.Next() {
		var e service.TopEntry
		var first, last int64
		if err := rows.Scan(&e.TenantID, &e.TenantName, &e.Identity.Kind, &e.Identity.ID, &e.Allowed, &e.Denied, &e.RateLimited, &e.InvalidKey, &e.Blocked, &e.ConcurrencyLimited, &first, &last); err != nil {
			return nil, err
		}
		if total := e.Allowed + e.Denied; total > 0 {
			e.DenialRatio = float64(e.Denied) / float64(total)
		}
		e.FirstSeen = time.Unix(first*60, 0).UTC()
		e.LastSeen = time.Unix(last*60+59, 0).UTC()
		if q.TenantID != "" {
			e.TenantID, e.TenantName = "", ""
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// topPolicies ranks the tenant's policies by denials over a range, the
// overview's "Most denied policies", summing minute and rolled-up rows as
// timeseries does. Unlike top it keeps the "others" cells: they are no
// identity but are a policy's, so each policy's totals are exact. Rows are
// grouped by policy name before the join, so the join sees one row per
// policy denied in the range, not one per cell.
func TopPolicies(ctx context.Context, db *sql.DB, q service.PolicyRankQuery) ([]service.PolicyRank, error) {
	if q.TenantID == "" {
		return nil, errs.Errorf(errs.Invalid, "tenant_id: required")
	}
	if err := validRange(q.From, q.To); err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = 20
	}
	if q.Limit < 1 || q.Limit > maxTop {
		return nil, errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", maxTop)
	}
	fromMin, toMin := rangeMinutes(q.From, q.To)
	rows, err := db.QueryContext(ctx, `SELECT p.id, p.name, c.allowed, c.denied, c.rate_limited, c.invalid_key, c.blocked, c.concurrency_limited FROM (
			SELECT policy, SUM(allowed) AS allowed, SUM(denied) AS denied, SUM(rate_limited) AS rate_limited,
				SUM(invalid_key) AS invalid_key, SUM(blocked) AS blocked, SUM(concurrency_limited) AS concurrency_limited
			FROM (
				SELECT policy, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited FROM counters
				WHERE tenant_id = ? AND minute >= ? AND minute < ?
				UNION ALL
				SELECT policy, allowed, denied, rate_limited, invalid_key, blocked, concurrency_limited FROM counter_rollups
				WHERE tenant_id = ? AND res IN (60, 1440) AND start >= ? AND start < ?
			) GROUP BY policy HAVING SUM(denied) > 0
		) c JOIN policies p ON p.tenant_id = ? AND p.name = c.policy
		ORDER BY c.denied DESC, p.name
		LIMIT ?`, q.TenantID, fromMin, toMin, q.TenantID, fromMin, toMin, q.TenantID, q.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []service.PolicyRank{}
	for rows.Next() {
		var r service.PolicyRank
		if err := rows.Scan(&r.ID, &r.Name, &r.Allowed, &r.Denied, &r.RateLimited, &r.InvalidKey, &r.Blocked, &r.ConcurrencyLimited); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Queries is service.Analytics over db.
type Queries struct{ DB *sql.DB }

// Timeseries implements service.Analytics.
func (a Queries) Timeseries(ctx context.Context, q service.TimeseriesQuery) (service.Timeseries, error) {
	return Timeseries(ctx, a.DB, q)
}

// Top implements service.Analytics.
func (a Queries) Top(ctx context.Context, q service.TopQuery) ([]service.TopEntry, error) {
	return Top(ctx, a.DB, q)
}

// TopPolicies implements service.Analytics.
func (a Queries) TopPolicies(ctx context.Context, q service.PolicyRankQuery) ([]service.PolicyRank, error) {
	return TopPolicies(ctx, a.DB, q)
}
