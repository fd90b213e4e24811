package api

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/tenants"
)

type checkBody struct {
	APIKey string `json:"api_key"`
	JWT    string `json:"jwt"`
	IP     string `json:"ip"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Cost   *int64 `json:"cost"`
	Peek   bool   `json:"peek"`
	// A reservation: the estimate taken now, settled later (POST /v1/settle).
	Reserve    *int64 `json:"reserve"`
	ReserveCap *int64 `json:"reserve_cap"`
	ReserveTTL string `json:"reserve_ttl"`
	// LeaseTTL is how long a slot of a concurrency limit is held unless
	// released (a Go duration, 1s to 24h).
	LeaseTTL string `json:"lease_ttl"`
	// Wait is how long the check may wait for its bucket ("500ms").
	Wait string `json:"wait"`
}

// reservation is what a check's reserve asks for, defaults filled.
type reservation struct {
	estimate, cap int64
	ttl           time.Duration
}

// recorded names the reservation recorded for an answer ("" for none).
type recorded struct {
	id      string
	expires time.Time
}

// request validates b as a check; a check with reserve also answers what
// it reserves.
func (b *checkBody) request(field string) (engine.CheckRequest, reservation, error) {
	r := engine.CheckRequest{APIKey: b.APIKey, JWT: b.JWT, IP: b.IP, Method: b.Method, Path: b.Path, Peek: b.Peek, Cost: 1}
	if b.LeaseTTL != "" {
		d, err := time.ParseDuration(b.LeaseTTL)
		if err != nil || d < engine.MinLeaseTTL || d > engine.MaxLeaseTTL {
			return r, reservation{}, errs.Errorf(errs.Invalid, "%slease_ttl: must be a duration from 1s to 24h, such as \"60s\"", field)
		}
		r.LeaseTTL = d
	}
	if b.Wait != "" {
		w, err := parseWait(b.Wait, field)
		if err != nil {
			return r, reservation{}, err
		}
		r.Wait = w
	}
	if b.Cost != nil {
		if *b.Cost < 1 {
			return r, reservation{}, errs.Errorf(errs.Invalid, "%scost: must be an integer of at least 1", field)
		}
		r.Cost = *b.Cost
	}
	if b.Reserve == nil {
		if b.ReserveCap != nil || b.ReserveTTL != "" {
			return r, reservation{}, errs.Errorf(errs.Invalid, "%sreserve: required with reserve_cap and reserve_ttl", field)
		}
		return r, reservation{}, nil
	}
	switch {
	case b.Cost != nil:
		return r, reservation{}, errs.Errorf(errs.Invalid, "%scost: not allowed with reserve, which is the check's cost", field)
	case b.Peek:
		return r, reservation{}, errs.Errorf(errs.Invalid, "%speek: a peek takes nothing and cannot reserve", field)
	}
	res := reservation{estimate: *b.Reserve, cap: *b.Reserve, ttl: reserve.DefaultTTL}
	if b.ReserveCap != nil {
		res.cap = *b.ReserveCap
	}
	if b.ReserveTTL != "" {
		d, err := time.ParseDuration(b.ReserveTTL)
		if err != nil {
			return r, reservation{}, errs.Errorf(errs.Invalid, "%sreserve_ttl: must be a duration such as \"10m\"", field)
		}
		res.ttl = d
	}
	if err := reserve.ValidateRequest(field, res.estimate, res.cap, res.ttl); err != nil {
		return r, reservation{}, err
	}
	r.Cost, r.Hold = res.estimate, true
	return r, res, nil
}

// newReservation is the reservation a check that took its estimate
// (a.Hold) records.
func newReservation(tenant string, res reservation, hold *reserve.Hold, now time.Time) reserve.Reservation {
	return reserve.Reservation{ID: tenants.NewID("rsv_"), TenantID: tenant, Hold: *hold, Reserved: res.estimate, Cap: res.cap,
		CreatedAt: now.UTC(), ExpiresAt: now.Add(res.ttl).UTC().Truncate(time.Millisecond)}
}

// recordReservation records the reservation of a check that took its
// estimate (a.Hold) at the worker. When the worker cannot record it, the
// estimate is given back and the check fails: a reservation the caller
// cannot settle must not hold units.
func (h decisionRoutes) recordReservation(c echo.Context, tenant string, res reservation, a *engine.Answer, now time.Time) (recorded, error) {
	if a.Hold == nil {
		return recorded{}, nil
	}
	r := newReservation(tenant, res, a.Hold, now)
	if err := h.Services.Reservations.Create(c.Request().Context(), r); err != nil {
		h.undoReservations(c, tenant, []reserve.Reservation{r}, err, now)
		return recorded{}, err
	}
	return recorded{id: r.ID, expires: r.ExpiresAt}, nil
}

// recordBatch records the reservations of a batch's checks that took
// their estimates, all or none: when the worker cannot record them all,
// every estimate is given back and the batch fails.
func (h decisionRoutes) recordBatch(c echo.Context, tenant string, reservations []reservation, answers []engine.Answer, now time.Time) ([]recorded, error) {
	recs := make([]recorded, len(answers))
	var rs []reserve.Reservation
	for i := range answers {
		if hd := answers[i].Hold; hd != nil {
			r := newReservation(tenant, reservations[i], hd, now)
			rs = append(rs, r)
			recs[i] = recorded{id: r.ID, expires: r.ExpiresAt}
		}
	}
	if len(rs) == 0 {
		return recs, nil
	}
	if err := h.Services.Reservations.CreateAll(c.Request().Context(), rs); err != nil {
		h.undoReservations(c, tenant, rs, err, now)
		return nil, err
	}
	return recs, nil
}

// undoReservations gives back the estimates of reservations whose record
// failed with err. A refusal (the tenant's cap, a bad request) recorded
// nothing; any other failure (a timeout, an unreachable worker) may have
// recorded them all the same, so they are cancelled at the worker too,
// lest they count as open until they expire.
func (h decisionRoutes) undoReservations(c echo.Context, tenant string, rs []reserve.Reservation, err error, now time.Time) {
	for i := range rs {
		h.giveBack(c, tenant, &rs[i].Hold, rs[i].Reserved, now)
	}
	switch errs.Code(err) {
	case errs.Conflict, errs.Invalid, errs.NotFound, errs.Unauthenticated, errs.Forbidden:
		return
	}
	if cerr := h.Services.Reservations.Cancel(context.WithoutCancel(c.Request().Context()), rs); cerr != nil {
		h.Log.Warn("reservations given back may stay open at the worker until they expire", "tenant", tenant,
			"reservations", len(rs), "err", cerr)
	}
}

// giveBack returns an estimate taken for a reservation that was never
// recorded.
func (h decisionRoutes) giveBack(c echo.Context, tenant string, hold *reserve.Hold, estimate int64, now time.Time) {
	if err := h.Engine.GiveBack(context.WithoutCancel(c.Request().Context()), tenant, *hold, estimate, now); err != nil {
		h.Log.Warn("a reservation that could not be recorded kept its estimate", "tenant", tenant, "policy", hold.Policy, "units", estimate, "err", err)
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (h decisionRoutes) check(c echo.Context) error {
	now := h.Now()
	// One pooled buffer carries the request body in and the answer out:
	// the decoded check holds copies of the strings it needs.
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	var body checkBody
	if err := bindCheck(c, &body, buf); err != nil {
		return err
	}
	req, res, err := body.request("")
	if err != nil {
		return err
	}
	if req.Hold {
		if err := h.reserves.allow(tenantID(c), 1); err != nil {
			return err
		}
	}
	a, err := h.Engine.Check(c.Request().Context(), tenantID(c), &req, now)
	if err != nil {
		return err
	}
	rec, err := h.recordReservation(c, tenantID(c), res, &a, now)
	if err != nil {
		return err
	}
	setRateLimitHeaders(c.Response().Header(), &a)
	out := appendAnswer((*buf)[:0], &a, rec)
	*buf = out
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
}

func (h decisionRoutes) checkBatch(c echo.Context) error {
	now := h.Now()
	var body struct {
		Checks []checkBody `json:"checks"`
	}
	if err := bind(c, &body); err != nil {
		return err
	}
	if len(body.Checks) < 1 || len(body.Checks) > 1000 {
		return errs.Errorf(errs.Invalid, "checks: must hold between 1 and 1000 checks")
	}
	reqs := make([]engine.CheckRequest, len(body.Checks))
	reservations := make([]reservation, len(body.Checks))
	holds := 0
	for i := range body.Checks {
		r, res, err := body.Checks[i].request("checks[" + strconv.Itoa(i) + "].")
		if err != nil {
			return err
		}
		reqs[i], reservations[i] = r, res
		if r.Hold {
			holds++
		}
	}
	if err := h.reserves.allow(tenantID(c), holds); err != nil {
		return err
	}
	answers, err := h.Engine.CheckBatch(c.Request().Context(), tenantID(c), reqs, now)
	if err != nil {
		// The checks decided before the failure keep what they took, as
		// any check's; their reservations' estimates go back, since the
		// batch answers none of their ids.
		for i := range answers {
			if hd := answers[i].Hold; hd != nil {
				h.giveBack(c, tenantID(c), hd, reservations[i].estimate, now)
			}
		}
		return err
	}
	recs, err := h.recordBatch(c, tenantID(c), reservations, answers, now)
	if err != nil {
		return err
	}
	out := []byte(`{"results":[`)
	for i := range answers {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendAnswer(out, &answers[i], recs[i])
	}
	out = append(out, "]}"...)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
}

// parseWait reads a check's wait: a Go duration above 0 and at most
// engine.MaxWait.
func parseWait(s, field string) (time.Duration, error) {
	w, err := time.ParseDuration(s)
	if err != nil || w <= 0 || w > engine.MaxWait {
		return 0, errs.Errorf(errs.Invalid, "%swait: must be a duration such as \"500ms\", above 0 and at most 30s", field)
	}
	return w, nil
}

// WaitRefusedHeader says why a check that asked to wait was denied before
// its wait ended (the answer's wait_refused).
const WaitRefusedHeader = "X-Sluice-Wait-Refused"

// ceilSeconds rounds a duration up to whole seconds, as Retry-After and the
// reset headers need: rounding down would invite a retry that is denied.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// setRateLimitHeaders writes the IETF draft headers for every limit of the
// decided tier, the conventional X-RateLimit-* for the reported limit, and
// Retry-After on a denial. This runs on every check: all values are built
// in one buffer and become one string, and every header's value slice is
// cut from one array, so a check's headers cost two allocations.
func setRateLimitHeaders(h http.Header, a *engine.Answer) {
	var stack [512]byte
	b := stack[:0]
	var ends [6]int // end offsets in b of each value written
	n := 0
	mark := func() { ends[n] = len(b); n++ }
	if len(a.Limits) > 0 {
		b = appendLimitItems(b, a.Limits, true)
		mark()
		b = appendLimitItems(b, a.Limits, false)
		mark()
		b = strconv.AppendInt(b, a.Limit, 10)
		mark()
		b = strconv.AppendInt(b, a.Remaining, 10)
		mark()
		b = strconv.AppendInt(b, ceilSeconds(a.Reset), 10)
		mark()
	}
	retry := !a.Allowed && a.RetryAfter > 0
	if retry {
		b = strconv.AppendInt(b, ceilSeconds(a.RetryAfter), 10)
		mark()
	}
	if n == 0 {
		return
	}
	all := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		start = ends[i]
	}
	v := func(i int) []string { return vals[i : i+1 : i+1] }
	if len(a.Limits) > 0 {
		h["Ratelimit-Policy"] = v(0)
		h["Ratelimit"] = v(1)
		h["X-Ratelimit-Limit"] = v(2)
		h["X-Ratelimit-Remaining"] = v(3)
		h["X-Ratelimit-Reset"] = v(4)
	}
	if retry {
		h["Retry-After"] = v(n - 1)
	}
	if a.WaitRefused != "" {
		h[WaitRefusedHeader] = []string{a.WaitRefused}
	}
}

// appendLimitItems writes one structured-field item per limit: the
// RateLimit-Policy form (quota q, window w) or, with policy false, the
// RateLimit form (remaining r, seconds until full t).
func appendLimitItems(b []byte, limits []engine.LimitStatus, policy bool) []byte {
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, l.Name)
		if policy {
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, l.Limit, 10)
			if l.Period > 0 { // a concurrency limit has no window
				b = append(b, ";w="...)
				b = strconv.AppendInt(b, ceilSeconds(l.Period), 10)
			}
		} else {
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, l.Remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSeconds(l.Reset), 10)
		}
	}
	return b
}

// appendAnswer encodes an answer as API.md's JSON without reflection: this
// is the hot path. Every string it writes is escaped.
func appendAnswer(b []byte, a *engine.Answer, rec recorded) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, a.Allowed)
	b = append(b, `,"reason":`...)
	b = appendString(b, a.Reason)
	b = append(b, `,"policy":`...)
	if a.Policy == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, a.Policy)
	}
	b = append(b, `,"tier":`...)
	if a.Tier == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, a.Tier)
	}
	b = append(b, `,"identity":{"kind":`...)
	b = appendString(b, a.IdentityKind)
	b = append(b, `,"id":`...)
	b = appendString(b, a.IdentityID)
	if c := a.Customer; c != nil {
		b = append(b, `},"customer":{"id":`...)
		b = appendString(b, c.ID)
		b = append(b, `,"external_id":`...)
		b = appendString(b, c.ExternalID)
	}
	b = append(b, `},"limit":`...)
	b = strconv.AppendInt(b, a.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, a.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, millis(a.Reset), 10)
	b = append(b, `,"retry_after_ms":`...)
	switch {
	case a.Allowed:
		b = append(b, '0')
	case a.RetryAfter == quota.Never:
		// The request costs more than the bucket can ever hold.
		b = append(b, "null"...)
	default:
		b = strconv.AppendInt(b, millis(a.RetryAfter), 10)
	}
	if a.ShadowDenied {
		b = append(b, `,"shadow_denied":true`...)
	}
	if a.Lease != "" {
		b = append(b, `,"lease":`...)
		b = appendString(b, a.Lease)
		b = append(b, `,"lease_expires_at":"`...)
		b = a.LeaseExpires.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if a.Waited > 0 {
		b = append(b, `,"waited_ms":`...)
		b = strconv.AppendInt(b, a.Waited.Milliseconds(), 10)
	}
	if a.WaitRefused != "" {
		b = append(b, `,"wait_refused":`...)
		b = appendString(b, a.WaitRefused)
	}
	if rec.id != "" {
		b = append(b, `,"reservation":`...)
		b = appendString(b, rec.id)
		b = append(b, `,"reservation_expires_at":"`...)
		b = rec.expires.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
