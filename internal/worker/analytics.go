package worker

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/bus"

	"github.com/sluicehq/sluice/internal/errs"
)

// Analytics queries over the counters table. Counts are exact for every
// decision whose counter batch the worker has committed; servers flush
// counters every second, so the newest second may not be in yet.

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

func (w *Worker) timeseries(ctx context.Context, q bus.TimeseriesQuery) (bus.Timeseries, error) {
	if err := validRange(q.From, q.To); err != nil {
		return bus.Timeseries{}, err
	}
	step, err := time.ParseDuration(q.Step)
	if q.Step == "" {
		step, err = time.Minute, nil
		q.Step = "1m"
	}
	if err != nil || step < time.Minute || step%time.Minute != 0 {
		return bus.Timeseries{}, errs.Errorf(errs.Invalid, "step: must be a whole number of minutes such as \"1m\", \"5m\" or \"1h\"")
	}
	fromMin := q.From.Unix() / 60
	toMin := (q.To.Unix() + 59) / 60
	stepMin := int64(step / time.Minute)
	n := (toMin - fromMin + stepMin - 1) / stepMin
	if n > maxPoints {
		return bus.Timeseries{}, errs.Errorf(errs.Invalid, "step: the range would have %d points; at most %d are allowed", n, maxPoints)
	}
	query := `SELECT (minute - ?) / ?, SUM(allowed), SUM(denied) FROM counters
		WHERE tenant_id = ? AND minute >= ? AND minute < ?`
	args := []any{fromMin, stepMin, q.TenantID, fromMin, toMin}
	if q.Policy != "" {
		query += ` AND policy = ?`
		args = append(args, q.Policy)
	}
	if q.Identity != nil {
		query += ` AND identity_kind = ? AND identity_id = ?`
		args = append(args, q.Identity.Kind, q.Identity.ID)
	}
	query += ` GROUP BY 1`
	rows, err := w.db.QueryContext(ctx, query, args...)
	if err != nil {
		return bus.Timeseries{}, err
	}
	defer rows.Close()
	points := make([]bus.TimeseriesPoint, n)
	for i := range points {
		points[i].Start = time.Unix((fromMin+int64(i)*stepMin)*60, 0).UTC()
	}
	for rows.Next() {
		var idx, a, d int64
		if err := rows.Scan(&idx, &a, &d); err != nil {
			return bus.Timeseries{}, err
		}
		if idx >= 0 && idx < n {
			points[idx].Allowed, points[idx].Denied = a, d
		}
	}
	if err := rows.Err(); err != nil {
		return bus.Timeseries{}, err
	}
	return bus.Timeseries{From: q.From.UTC(), To: q.To.UTC(), Step: q.Step, Points: points}, nil
}

func (w *Worker) top(ctx context.Context, q bus.TopQuery) ([]bus.TopEntry, error) {
	if err := validRange(q.From, q.To); err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = 20
	}
	if q.Limit < 1 || q.Limit > maxTop {
		return nil, errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", maxTop)
	}
	fromMin, toMin := q.From.Unix()/60, (q.To.Unix()+59)/60
	query := `SELECT c.tenant_id, COALESCE(t.name, ''), c.identity_kind, c.identity_id,
			SUM(c.allowed), SUM(c.denied), MIN(c.minute), MAX(c.minute)
		FROM counters c LEFT JOIN tenants t ON t.id = c.tenant_id
		WHERE c.minute >= ? AND c.minute < ?`
	args := []any{fromMin, toMin}
	if q.TenantID != "" {
		query += ` AND c.tenant_id = ?`
		args = append(args, q.TenantID)
	}
	if q.Policy != "" {
		query += ` AND c.policy = ?`
		args = append(args, q.Policy)
	}
	if q.Identity != nil {
		query += ` AND c.identity_kind = ? AND c.identity_id = ?`
		args = append(args, q.Identity.Kind, q.Identity.ID)
	}
	if q.IdentityKind != "" {
		query += ` AND c.identity_kind = ?`
		args = append(args, q.IdentityKind)
	}
	query += ` GROUP BY c.tenant_id, c.identity_kind, c.identity_id`
	if !q.IncludeAllowed {
		query += ` HAVING SUM(c.denied) > 0`
	}
	query += `
		ORDER BY SUM(c.denied) DESC, SUM(c.denied) * 1.0 / (SUM(c.allowed) + SUM(c.denied)) DESC, c.identity_id
		LIMIT ?`
	args = append(args, q.Limit)
	rows, err := w.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []bus.TopEntry{}
	for rows.Next() {
		var e bus.TopEntry
		var first, last int64
		if err := rows.Scan(&e.TenantID, &e.TenantName, &e.Identity.Kind, &e.Identity.ID, &e.Allowed, &e.Denied, &first, &last); err != nil {
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
