package bus

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
)

func sampleState() ([]LimitWire, []StateWire) {
	limits := []LimitWire{
		{Name: "burst", Algorithm: "token_bucket", Limit: 10, PeriodNS: int64(time.Second), Burst: 20},
		{Name: "daily", Algorithm: "sliding_log", Limit: 3, PeriodNS: int64(24 * time.Hour)},
		{Algorithm: "sliding_window", Limit: 1 << 40, PeriodNS: math.MaxInt64},
	}
	states := []StateWire{
		{Tokens: 7.25, At: 1_790_000_000_123_456_789},
		{Log: []int64{-5, 0, 1_790_000_000_000_000_000}},
		{Tokens: math.Inf(1), Prev: -0.5, At: -1},
	}
	return limits, states
}

func TestStateRoundTrip(t *testing.T) {
	limits, states := sampleState()
	b := AppendState(nil, limits, states)
	gl, gs, err := DecodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gl, limits) || !reflect.DeepEqual(gs, states) {
		t.Fatalf("round trip:\n%+v\n%+v", gl, gs)
	}
	ql, qs, err := DecodeStateInto(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantL, _ := DecodeLimits(limits)
	if !reflect.DeepEqual(ql, wantL) || !reflect.DeepEqual(qs, DecodeStates(states)) {
		t.Fatalf("into quota:\n%+v\n%+v", ql, qs)
	}
	// NaN survives bit for bit (a corrupt state is the cache's to sanitise).
	nan := AppendState(nil, limits[:1], []StateWire{{Tokens: math.NaN()}})
	if _, s, err := DecodeState(nan); err != nil || !math.IsNaN(s[0].Tokens) {
		t.Fatalf("NaN: %v %v", s, err)
	}
}

// Rows written before the binary form hold JSON; they are still read, and
// BinaryState converts them.
func TestStateReadsJSONRows(t *testing.T) {
	limits, states := sampleState()
	states = states[:2] // JSON has no infinity
	js, err := json.Marshal(PersistedJSON{Limits: limits, States: states})
	if err != nil {
		t.Fatal(err)
	}
	gl, gs, err := DecodeState(js)
	if err != nil || !reflect.DeepEqual(gl, limits) || !reflect.DeepEqual(gs, states) {
		t.Fatalf("JSON row: %+v %+v %v", gl, gs, err)
	}
	bin, err := BinaryState(nil, js)
	if err != nil {
		t.Fatal(err)
	}
	if want := AppendState(nil, limits, states); string(bin) != string(want) {
		t.Fatalf("converted %x, want %x", bin, want)
	}
	if _, err := BinaryState(nil, []byte("x")); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestStateRejectsDamage(t *testing.T) {
	limits, states := sampleState()
	b := AppendState(nil, limits, states)
	for i := 0; i < len(b); i++ {
		if _, _, err := DecodeState(b[:i]); err == nil {
			t.Fatalf("truncated at %d of %d: no error", i, len(b))
		}
	}
	if _, _, err := DecodeState(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	bad := AppendState(nil, []LimitWire{{Algorithm: "leaky"}}, nil)
	if _, _, err := DecodeStateInto(bad, nil, nil); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}

func TestPackedPage(t *testing.T) {
	limits, states := sampleState()
	st := AppendState(nil, limits, states)
	var page []byte
	page = AppendPacked(page, "ten_a/pol_1/ip:192.0.2.1", "ten_a", 42, st)
	page = AppendPacked(page, "ten_b/pol_2/key:ckey_1", "ten_b", -1, st[:0])
	var got []PackedRecord
	if err := WalkPacked(page, func(r PackedRecord) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Key) != "ten_a/pol_1/ip:192.0.2.1" || string(got[0].TenantID) != "ten_a" ||
		got[0].FullAt != 42 || string(got[0].State) != string(st) || string(got[1].Key) != "ten_b/pol_2/key:ckey_1" ||
		got[1].FullAt != -1 || len(got[1].State) != 0 {
		t.Fatalf("walked %+v", got)
	}
	if err := WalkPacked(page[:len(page)-1], func(PackedRecord) error { return nil }); err == nil {
		t.Fatal("truncated page: no error")
	}
}

func FuzzDecodeState(f *testing.F) {
	limits, states := sampleState()
	f.Add(AppendState(nil, limits, states))
	f.Add([]byte{1, 0, 0})
	f.Add([]byte(`{"limits":[],"states":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, s, err := DecodeState(b)
		if err != nil || len(b) == 0 || b[0] != stateFormatV1 {
			return
		}
		// What decodes survives a round trip (varints may have longer
		// spellings than the encoder writes, so compare values).
		l2, s2, err := DecodeState(AppendState(nil, l, s))
		if err != nil || !reflect.DeepEqual(l2, l) || !sameStates(s2, s) {
			t.Fatalf("round trip of %x: %+v %+v %v", b, l2, s2, err)
		}
		_, _, _ = DecodeStateInto(b, []quota.Limit{}, nil)
	})
}

// sameStates compares states with floats by their bits (NaN included).
func sameStates(a, b []StateWire) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i].Tokens) != math.Float64bits(b[i].Tokens) || math.Float64bits(a[i].Prev) != math.Float64bits(b[i].Prev) ||
			a[i].At != b[i].At || !reflect.DeepEqual(a[i].Log, b[i].Log) {
			return false
		}
	}
	return true
}

// A packed state batch carries each bucket's key, tenant, full-at time and
// binary state (and, fenced, its partition term), and refuses damage
// instead of guessing.
func TestPackedStateBatch(t *testing.T) {
	limits, states := sampleState()
	recs := []BucketRecord{
		{Key: "ten_a/pol_1/ip:192.0.2.1", TenantID: "ten_a", Limits: limits, States: states, FullAt: 42, Term: 7},
		{Key: "ten_b/pol_2/key:ckey_1", TenantID: "ten_b", Limits: limits[:1], States: states[:1], FullAt: -7, Term: 1 << 40},
	}
	for _, fenced := range []bool{false, true} {
		data := AppendPackedStateBatch(nil, "node-1", recs, fenced)
		if !IsPackedStateBatch(data) || IsPackedStateBatch([]byte(`{"v":1}`)) {
			t.Fatal("packed and JSON batches are not told apart")
		}
		var got []BucketRecord
		node, err := WalkPackedStateBatch(data, func(r PackedRecord, term uint64) error {
			l, s, err := DecodeState(r.State)
			got = append(got, BucketRecord{Key: string(r.Key), TenantID: string(r.TenantID), FullAt: r.FullAt, Limits: l, States: s, Term: term})
			return err
		})
		if err != nil || node != "node-1" || len(got) != 2 {
			t.Fatalf("fenced %v: walked %d records from %q: %v", fenced, len(got), node, err)
		}
		for i := range recs {
			want := recs[i]
			if !fenced {
				want.Term = 0
			}
			if got[i].Key != want.Key || got[i].TenantID != want.TenantID || got[i].FullAt != want.FullAt || got[i].Term != want.Term ||
				!reflect.DeepEqual(got[i].Limits, want.Limits) || !sameStates(got[i].States, want.States) {
				t.Fatalf("fenced %v: record %d: %+v, want %+v", fenced, i, got[i], want)
			}
		}
		magic := byte(packedBatchMagic)
		if fenced {
			magic = fencedBatchMagic
		}
		for name, bad := range map[string][]byte{
			"truncated":     data[:len(data)-1],
			"wire version":  append([]byte{magic, 99}, data[2:]...),
			"JSON state":    AppendPacked(AppendPackedStateBatch(nil, "n", nil, fenced), "k", "t", 1, []byte(`{"limits":[]}`)),
			"no node":       {magic, WireVersion},
			"leading brace": []byte(`{}`),
		} {
			if fenced && name == "JSON state" {
				bad = binary.AppendUvarint(bad, 1)
			}
			if _, err := WalkPackedStateBatch(bad, func(PackedRecord, uint64) error { return nil }); err == nil {
				t.Errorf("fenced %v: %s: no error", fenced, name)
			}
		}
	}
}

// A calendar limit survives the trip through a persisted state: its unit,
// anchor and zone come back, equal to the one it was, so a hydrated bucket
// keeps its count in the same window.
func TestCalendarLimitRoundTrip(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	month, err := quota.NewCalendar(quota.CalendarMonth, paris, 17)
	if err != nil {
		t.Fatal(err)
	}
	day, _ := quota.NewCalendar(quota.CalendarDay, time.UTC, 0)
	limits := []quota.Limit{
		{Name: "monthly", Algorithm: quota.FixedWindow, Limit: 10000, Period: 30 * 24 * time.Hour, Calendar: month},
		{Name: "daily", Algorithm: quota.FixedWindow, Limit: 500, Period: 24 * time.Hour, Calendar: day},
		{Name: "burst", Algorithm: quota.TokenBucket, Limit: 10, Period: time.Second},
	}
	states := []StateWire{{Tokens: 3, At: 1}, {Tokens: 1, At: 2}, {Tokens: 9, At: 3}}
	b := AppendState(nil, EncodeLimits(limits), states)
	got, _, err := DecodeStateInto(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range limits {
		w, g := limits[i], got[i]
		if w.Name != g.Name || w.Algorithm != g.Algorithm || w.Limit != g.Limit || w.Period != g.Period || !w.Calendar.Equal(g.Calendar) {
			t.Errorf("limit %d: %+v (calendar %v), want %+v (calendar %v)", i, g, g.Calendar, w, w.Calendar)
		}
	}
	if _, err := DecodeLimits([]LimitWire{{Algorithm: "fixed_window;fortnight;UTC", Limit: 1}}); err == nil {
		t.Error("an unknown calendar unit decoded")
	}
	if _, err := DecodeLimits([]LimitWire{{Algorithm: "fixed_window;month@1;Mars/Olympus", Limit: 1}}); err == nil {
		t.Error("an unknown zone decoded")
	}
}

// A concurrency limit's leases (pairs of expiry and a random token, which
// may be negative) travel in the state's log, in the format every worker
// version stores, and come back as they were.
func TestStateRoundTripConcurrency(t *testing.T) {
	limits := []quota.Limit{{Name: "rate", Algorithm: quota.TokenBucket, Limit: 10, Period: time.Second}, {Name: "slots", Algorithm: quota.Concurrency, Limit: 3}}
	states := []quota.State{{Tokens: 4, At: 1e18}, {Log: []int64{1_800_000_000_000_000_000, -7_000_000_000_000_000_001, 1_800_000_000_500_000_000, 42}}}
	w := make([]StateWire, len(states))
	for i, s := range states {
		w[i] = StateWire{Tokens: s.Tokens, Prev: s.Prev, At: s.At, Log: s.Log}
	}
	b := AppendState(nil, EncodeLimits(limits), w)
	gotL, gotS, err := DecodeStateInto(b, nil, nil)
	if err != nil || !reflect.DeepEqual(gotL, limits) || !reflect.DeepEqual(gotS, states) {
		t.Fatalf("round trip: %+v %+v %v", gotL, gotS, err)
	}
}
