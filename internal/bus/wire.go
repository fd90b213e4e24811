package bus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tenants"
)

// LimitWire is a quota.Limit on the wire.
type LimitWire struct {
	Name      string `json:"n,omitempty"`
	Algorithm string `json:"a"`
	Limit     int64  `json:"l"`
	PeriodNS  int64  `json:"p"`
	Burst     int64  `json:"b,omitempty"`
}

// StateWire is a quota.State on the wire.
type StateWire struct {
	Tokens float64 `json:"t,omitempty"`
	Prev   float64 `json:"p,omitempty"`
	At     int64   `json:"a,omitempty"`
	Log    []int64 `json:"g,omitempty"`
}

// BucketRecord is one bucket's persisted form: its key
// (tenant/policy/identity), the limits it was last decided under, the state
// of each, and when it is full again (unix ns; 0 = reset, delete it).
//
// Term is the fencing token of the partition owner that decided the state
// (the term the worker gave that owner when it loaded the partition, see
// BucketsRequest.Acquire); 0 for a state decided without an owner (a single
// server, a local-mode policy), which no term fences.
type BucketRecord struct {
	Key      string      `json:"k"`
	TenantID string      `json:"tn"`
	Limits   []LimitWire `json:"l"`
	States   []StateWire `json:"s"`
	FullAt   int64       `json:"f"`
	Term     uint64      `json:"tm,omitempty"`
}

// LeaseID names one lease write in the cluster's owners bucket: the
// bucket's incarnation (creation time, unix ns) and the revision the write
// got. A later write has a greater LeaseID, also across a bucket that NATS
// lost and made anew.
type LeaseID struct {
	Incarnation int64  `json:"inc"`
	Revision    uint64 `json:"rev"`
}

// After reports whether id was written after o.
func (id LeaseID) After(o LeaseID) bool {
	if id.Incarnation != o.Incarnation {
		return id.Incarnation > o.Incarnation
	}
	return id.Revision > o.Revision
}

// StateBatch is one message on the state stream.
type StateBatch struct {
	V       int            `json:"v"`
	Node    string         `json:"node"`
	Buckets []BucketRecord `json:"buckets"`
}

// CounterKey names one analytics cell.
type CounterKey struct {
	TenantID     string `json:"tn"`
	Policy       string `json:"p"`
	Tier         string `json:"ti"`
	IdentityKind string `json:"ik"`
	IdentityID   string `json:"id"`
	Minute       int64  `json:"m"` // unix minutes
}

// CounterRow is a delta to add to one cell. Denied is every denial; the
// reasons split it (a row from an older server carries none, and its
// denials count without a reason; an older worker ignores
// ConcurrencyLimited, and counts those denials in Denied only).
type CounterRow struct {
	CounterKey
	Allowed            int64 `json:"a,omitempty"`
	Denied             int64 `json:"d,omitempty"`
	RateLimited        int64 `json:"drl,omitempty"`
	InvalidKey         int64 `json:"dik,omitempty"`
	Blocked            int64 `json:"dbl,omitempty"`
	ConcurrencyLimited int64 `json:"dcl,omitempty"`
	// Units is what the cell's decisions consumed from their quotas: the
	// cost of each allowed decision, plus what settles charged (positive)
	// or refunded (negative). A row from an older server carries none.
	Units int64 `json:"u,omitempty"`
}

// CounterOthers is the identity kind of the cells that count, per tenant,
// policy, tier and minute, the decisions of every identity not counted in
// a cell of its own (a server's or the worker's bound on identities was
// reached, or the identity was not among a period's top ones). Its
// IdentityID is empty. Totals over all cells stay exact.
const CounterOthers = "others"

// CounterBatch is one message on the counter stream.
type CounterBatch struct {
	V    int          `json:"v"`
	Node string       `json:"node"`
	Rows []CounterRow `json:"rows"`
}

// EncodeLimits converts limits to their wire form.
func EncodeLimits(limits []quota.Limit) []LimitWire {
	out := make([]LimitWire, len(limits))
	for i, l := range limits {
		out[i] = LimitWire{Name: l.Name, Algorithm: algorithmWire(&l), Limit: l.Limit, PeriodNS: int64(l.Period), Burst: l.Burst}
	}
	return out
}

// DecodeLimits converts wire limits back, rejecting unknown algorithms.
func DecodeLimits(ws []LimitWire) ([]quota.Limit, error) {
	out := make([]quota.Limit, len(ws))
	for i, w := range ws {
		l, err := decodeLimit(w)
		if err != nil {
			return nil, err
		}
		out[i] = l
	}
	return out, nil
}

// A calendar limit travels, and is persisted with its buckets' states, as
// its algorithm followed by its calendar: "fixed_window;month@17;Europe/Paris".
// Every other limit's algorithm is its name alone, as before calendars.
const calendarSep = ";"

// algorithmWire is l's algorithm on the wire, with its calendar.
func algorithmWire(l *quota.Limit) string {
	if l.Calendar == nil {
		return l.Algorithm.String()
	}
	c := l.Calendar
	unit := c.Unit().String()
	if c.Unit() == quota.CalendarMonth {
		unit += "@" + strconv.Itoa(c.Anchor())
	}
	return l.Algorithm.String() + calendarSep + unit + calendarSep + c.Location().String()
}

// decodeLimit reads one wire limit.
func decodeLimit(w LimitWire) (quota.Limit, error) {
	alg, cal, _ := strings.Cut(w.Algorithm, calendarSep)
	a, err := quota.ParseAlgorithm(alg)
	if err != nil {
		return quota.Limit{}, err
	}
	l := quota.Limit{Name: w.Name, Algorithm: a, Limit: w.Limit, Period: time.Duration(w.PeriodNS), Burst: w.Burst}
	if cal != "" {
		if l.Calendar, err = decodeCalendar(cal); err != nil {
			return quota.Limit{}, err
		}
	}
	return l, nil
}

// calendars shares the calendars decoded from the wire, by their text: a
// hydration decodes the same few over and over.
var calendars sync.Map // string -> *quota.Calendar

// decodeCalendar reads "month@17;Europe/Paris".
func decodeCalendar(s string) (*quota.Calendar, error) {
	if c, ok := calendars.Load(s); ok {
		return c.(*quota.Calendar), nil
	}
	unitText, zone, ok := strings.Cut(s, calendarSep)
	if !ok {
		return nil, fmt.Errorf("limit calendar %q: no time zone", s)
	}
	unitName, anchorText, _ := strings.Cut(unitText, "@")
	unit, err := quota.ParseCalendarUnit(unitName)
	if err != nil {
		return nil, fmt.Errorf("limit calendar %q: %w", s, err)
	}
	anchor := 0
	if anchorText != "" {
		if anchor, err = strconv.Atoi(anchorText); err != nil {
			return nil, fmt.Errorf("limit calendar %q: anchor: %w", s, err)
		}
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("limit calendar %q: %w", s, err)
	}
	c, err := quota.NewCalendar(unit, loc, anchor)
	if err != nil {
		return nil, fmt.Errorf("limit calendar %q: %w", s, err)
	}
	if v, loaded := calendars.LoadOrStore(s, c); loaded {
		return v.(*quota.Calendar), nil
	}
	return c, nil
}

// EncodeStates copies states to their wire form (Log slices are copied, so
// the result outlives the cache lock).
func EncodeStates(states []quota.State) []StateWire {
	out := make([]StateWire, len(states))
	for i, s := range states {
		out[i] = StateWire{Tokens: s.Tokens, Prev: s.Prev, At: s.At}
		if len(s.Log) > 0 {
			out[i].Log = append([]int64(nil), s.Log...)
		}
	}
	return out
}

// DecodeStates converts wire states back.
func DecodeStates(ws []StateWire) []quota.State {
	out := make([]quota.State, len(ws))
	for i, w := range ws {
		out[i] = quota.State{Tokens: w.Tokens, Prev: w.Prev, At: w.At, Log: w.Log}
	}
	return out
}

// WireError is an *errs.Error on the wire.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfterMs is a rate_limited error's errs.Error.RetryAfter; a
	// reader that does not know it ignores it.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// Reply is the envelope of every request/reply answer: exactly one of
// Error and Result is set.
type Reply struct {
	V      int             `json:"v"`
	Error  *WireError      `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Parts, instead of a result, says the encoded reply was larger than
	// one NATS message: its bytes are to be fetched from PartSubject.
	Parts *PartsRef `json:"parts,omitempty"`
}

// PartsRef names a large reply kept by the worker for a minute.
type PartsRef struct {
	ID    string `json:"id"`
	Count int    `json:"count"`
}

// PartRequest asks PartSubject for part Part (from 0) of reply ID. The
// answer's data is the part's raw bytes; a PartErrorHeader says why there
// are none.
type PartRequest struct {
	ID   string `json:"id"`
	Part int    `json:"part"`
}

// PartErrorHeader, on a PartSubject answer, carries an error message
// instead of data.
const PartErrorHeader = "Sluice-Part-Error"

// SplitReply returns data as parts of at most maxPart bytes.
func SplitReply(data []byte, maxPart int) [][]byte {
	var parts [][]byte
	for len(data) > 0 {
		n := min(len(data), maxPart)
		parts = append(parts, data[:n])
		data = data[n:]
	}
	return parts
}

// EncodeParts is the reply that stands for a large reply kept in parts.
func EncodeParts(id string, count int) []byte {
	b, _ := json.Marshal(Reply{V: WireVersion, Parts: &PartsRef{ID: id, Count: count}})
	return b
}

// EncodeReply builds the reply for a result or an error. Internal errors
// travel as a generic message; their text stays in the worker's log.
func EncodeReply(result any, err error) []byte {
	r := Reply{V: WireVersion}
	if err != nil {
		r.Error = &WireError{Code: errs.Code(err), Message: errs.Message(err), RetryAfterMs: (errs.RetryAfter(err) + time.Millisecond - 1).Milliseconds()}
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			r.Error = &WireError{Code: errs.Internal, Message: errs.Message(merr)}
		} else {
			r.Result = b
		}
	}
	b, _ := json.Marshal(r)
	return b
}

// DecodeReply unpacks a reply into out (which may be nil), turning a wire
// error back into an *errs.Error.
func DecodeReply(data []byte, out any) error {
	var r Reply
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	if r.V != WireVersion {
		return fmt.Errorf("decode reply: unknown wire version %d", r.V)
	}
	if r.Error != nil {
		return &errs.Error{Code: r.Error.Code, Message: r.Error.Message, RetryAfter: time.Duration(r.Error.RetryAfterMs) * time.Millisecond}
	}
	if out != nil && len(r.Result) > 0 {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("decode reply result: %w", err)
		}
	}
	return nil
}

func unavailable(subject string, err error) error {
	return fmt.Errorf("%w (%s: %v)", errs.Errorf(errs.Unavailable, "The Sluice worker is not reachable; try again shortly."), subject, err)
}

// ChangeMsg is one announcement on ChangesSubject: every change of one
// committed config write, all with the same version.
type ChangeMsg struct {
	V       int              `json:"v"`
	Changes []tenants.Change `json:"changes"`
}
