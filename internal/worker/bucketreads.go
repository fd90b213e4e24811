package worker

import (
	"context"
	"database/sql"
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
)

// bucketReader answers what servers read of the persisted buckets: the
// pages of a hydration or a partition take-over, and the buckets a
// server's first checks touch before its hydration reaches them. It reads
// the buckets table and the staged runs (runs.go) together, and writes
// nothing itself: a first page waits for the streams' backlog to be
// committed (sync) and may raise its partition's term (acquire). Safe for
// concurrent use.
type bucketReader struct {
	db   *sql.DB
	runs *stagedRuns
	now  func() time.Time
	log  *slog.Logger
	// maxPayload is NATS's max_payload; a page ends at half of it.
	maxPayload func() int64
	// sync waits until every state batch already in the stream is
	// committed.
	sync func(context.Context) error
	// acquire raises partition p's term for a lease write
	// (partitionTerms.raise).
	acquire func(ctx context.Context, p int, lease bus.LeaseID) (uint64, error)

	// pageRowBytes is what a live bucket took in the last hydration page,
	// to size the next page's reads (readMerged).
	pageRowBytes atomic.Int64
	// pagePacked is the length of the last full packed hydration page, to
	// size the next one's buffer (pageBuilder.add).
	pagePacked atomic.Int64

	keyOrderWarned atomic.Int64 // unix ns of the last warnKeyOrder
}

const (
	// maxPage is the most buckets one page holds; a page also ends at half
	// of NATS's max_payload.
	maxPage = 20000
	// maxPageKeys is the most buckets one request may name.
	maxPageKeys = 1000
)

// page answers hydration. The first page waits until every state
// batch already in the stream is committed, so a restarted server never
// hydrates from state older than what it published before it died.
//
// Each page reads buckets and the staged runs together (readMerged). A
// page in (partition, key) order reads one partition at a time, going on
// to the next while the page has room.
func (r *bucketReader) page(ctx context.Context, req bus.BucketsRequest) (bus.BucketsPage, error) {
	if len(req.Keys) > 0 {
		return r.byKey(ctx, req.Keys, req.Packed)
	}
	var term uint64
	if req.After == "" {
		if err := r.sync(ctx); err != nil {
			return bus.BucketsPage{}, err
		}
		if req.Acquire && req.Partition != nil {
			var err error
			if term, err = r.acquire(ctx, *req.Partition, req.Lease); err != nil {
				return bus.BucketsPage{}, err
			}
		}
	}
	if req.Limit <= 0 || req.Limit > maxPage {
		req.Limit = maxPage
	}
	// A packed page's buffer is sized as the last full page, with room to
	// spare: one buffer, not a doubling.
	pb := r.newPageBuilder(req.Packed, r.now().UnixNano(), max(int(r.pagePacked.Load())*9/8, 64<<10))
	defer func() {
		if pb.live > 0 {
			r.pageRowBytes.Store(int64(pb.size / pb.live))
		}
		if pb.page.Next != "" && len(pb.page.Packed) > 0 {
			r.pagePacked.Store(int64(len(pb.page.Packed)))
		}
	}()
	switch {
	case req.Partition != nil:
		// One partition: a range of the table, in key order (the same
		// order as bus.CompareBucketKeys within a partition).
		more, err := r.readMerged(ctx, pb, req.Limit, `part = ? AND key > ?`, *req.Partition, req.After)
		if err != nil {
			return bus.BucketsPage{}, err
		}
		if more {
			pb.page.Next = pb.last
		}
		pb.page.Term = term
		return pb.page, nil
	case req.Order == bus.OrderPartitionKey:
		part, after := 0, req.After
		if after != "" {
			part = bus.Partition([]byte(after))
		}
		for ; part < bus.Partitions; part, after = part+1, "" {
			more, err := r.readMerged(ctx, pb, req.Limit-pb.read, `part = ? AND key > ?`, part, after)
			if err != nil {
				return bus.BucketsPage{}, err
			}
			if more || pb.read >= req.Limit {
				pb.page.Next = pb.last
				break
			}
		}
		pb.page.Order = req.Order
		return pb.page, nil
	default:
		r.warnKeyOrder()
		more, err := r.readMerged(ctx, pb, req.Limit, `key > ?`, req.After)
		if err != nil {
			return bus.BucketsPage{}, err
		}
		if more {
			pb.page.Next = pb.last
		}
		return pb.page, nil
	}
}

// warnKeyOrder logs, at most once a minute, that a server asked for
// hydration pages in plain key order: a server older than the worker. Such
// pages are correct but cost the worker a sort of the whole table each.
func (r *bucketReader) warnKeyOrder() {
	now := time.Now().UnixNano()
	last := r.keyOrderWarned.Load()
	if now-last < int64(time.Minute) || !r.keyOrderWarned.CompareAndSwap(last, now) {
		return
	}
	r.log.Warn("a server asked for hydration pages in key order; it is older than this worker and its pages cost a sort of the bucket table each: upgrade it")
}

// byKey answers the live persisted buckets among keys: each key's
// newest state in buckets or in a staged run.
func (r *bucketReader) byKey(ctx context.Context, keys []string, packed bool) (bus.BucketsPage, error) {
	if len(keys) > maxPageKeys {
		return bus.BucketsPage{}, errs.Errorf(errs.Invalid, "keys: at most %d in one request", maxPageKeys)
	}
	args := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, bus.Partition([]byte(k)), k)
	}
	q := `WITH k(part, key) AS (VALUES (?, ?)` + strings.Repeat(", (?, ?)", len(keys)-1) + `)
	SELECT b.key, b.tenant_id, b.state, b.full_at, b.seq FROM k JOIN buckets b ON b.part = k.part AND b.key = k.key
	UNION ALL
	SELECT r.key, r.tenant_id, r.state, r.full_at, r.seq FROM k JOIN bucket_runs r ON r.run IN (SELECT run FROM bucket_run_ids) AND r.part = k.part AND r.key = k.key`
	found, err := queryStored(ctx, r.db, q, args...)
	if err != nil {
		return bus.BucketsPage{}, err
	}
	slices.SortFunc(found, func(a, b storedBucket) int { return strings.Compare(a.key, b.key) })
	// The buffer fits what was found: these are the first touches of a
	// hydrating server, often one key each.
	size := 0
	for _, b := range found {
		size += len(b.key) + len(b.tenant) + len(b.state) + 2*binary.MaxVarintLen64
	}
	pb := r.newPageBuilder(packed, r.now().UnixNano(), size)
	for i := 0; i < len(found); {
		j, newest := i+1, i
		for ; j < len(found) && found[j].key == found[i].key; j++ {
			if found[j].seq > found[newest].seq {
				newest = j
			}
		}
		pb.add(&found[newest])
		i = j
	}
	return pb.page, nil
}

// storedBucket is one persisted row of a bucket, from buckets or a run.
type storedBucket struct {
	key, tenant string
	state       []byte
	fullAt, seq int64
	src         int // which table: 0 buckets, 1 a run (readMerged)
}

// storedScanner reads storedBucket rows with few allocations: states go
// into one buffer, and a tenant id like the row before's is shared.
type storedScanner struct {
	tenant, state sql.RawBytes
	lastTenant    string
	buf           []byte
	ends          []int // where each row's state ends in buf
	dest          []any
}

// scan reads the current row (key, tenant_id, state, full_at, seq, and src
// when withSrc) into b; b.state is set by finish.
func (s *storedScanner) scan(rows *sql.Rows, b *storedBucket, withSrc bool) error {
	s.dest = append(s.dest[:0], &b.key, &s.tenant, &s.state, &b.fullAt, &b.seq)
	if withSrc {
		s.dest = append(s.dest, &b.src)
	}
	if err := rows.Scan(s.dest...); err != nil {
		return err
	}
	if string(s.tenant) != s.lastTenant {
		s.lastTenant = string(s.tenant)
	}
	b.tenant = s.lastTenant
	s.buf = append(s.buf, s.state...)
	s.ends = append(s.ends, len(s.buf))
	return nil
}

// finish points the scanned rows' states into the buffer, in scan order.
func (s *storedScanner) finish(bs ...[]storedBucket) {
	i, start := 0, 0
	for _, list := range bs {
		for j := range list {
			list[j].state = s.buf[start:s.ends[i]:s.ends[i]]
			start = s.ends[i]
			i++
		}
	}
}

func queryStored(ctx context.Context, db *sql.DB, query string, args ...any) ([]storedBucket, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storedBucket
	var sc storedScanner
	for rows.Next() {
		var b storedBucket
		if err := sc.scan(rows, &b, false); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	sc.finish(out)
	return out, rows.Err()
}

// readMerged adds to pb, in key order, the newest state of each key that
// matches cond (a condition on part and key) in buckets or a staged run,
// reading at most limit keys, and reports whether more may follow. Both
// tables are read in one statement, so in one snapshot.
//
// Each table is read up to its limit; keys beyond the first table's last
// row, or up to the runs' last key (whose other versions may be cut off),
// are left for the next page. A key is in a run at most once, so the runs
// are read up to limit plus the number of runs: the page always advances.
func (r *bucketReader) readMerged(ctx context.Context, pb *pageBuilder, limit int, cond string, args ...any) (more bool, err error) {
	if limit <= 0 {
		return true, nil
	}
	// Read about as many rows as the page has room for: a page ends at
	// half of max_payload, often long before limit, and rows read past it
	// would be read again for the next page.
	if per := r.pageRowBytes.Load(); per > 0 {
		limit = min(limit, max(pb.budget-pb.size, 0)/int(per)+64)
	}
	runLimit := limit + max(r.runs.count(), maxRuns) + 1
	q := `SELECT key, tenant_id, state, full_at, seq, 0 FROM (SELECT key, tenant_id, state, full_at, seq FROM buckets WHERE ` + cond + ` ORDER BY key LIMIT ?)
	UNION ALL
	SELECT key, tenant_id, state, full_at, seq, 1 FROM (SELECT key, tenant_id, state, full_at, seq FROM bucket_runs WHERE run IN (SELECT run FROM bucket_run_ids) AND ` + cond + ` ORDER BY key LIMIT ?)`
	qargs := append(append(append(append([]any{}, args...), limit), args...), runLimit)
	rows, err := r.db.QueryContext(ctx, q, qargs...)
	if err != nil {
		return false, err
	}
	// The rows go into buffers kept from earlier reads: a page takes
	// several reads, and hydration hundreds of pages. Nothing read here
	// outlives the call but keys (strings) and what pb copied.
	rs := readScratchPool.Get().(*readScratch)
	defer rs.put()
	all, sc := rs.all[:0], &rs.sc
	var scanErr error
	for rows.Next() {
		all = append(all, storedBucket{})
		if scanErr = sc.scan(rows, &all[len(all)-1], true); scanErr != nil {
			break
		}
	}
	rs.all = all
	rows.Close()
	if scanErr != nil {
		return false, scanErr
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	sc.finish(all)
	// The UNION ALL gives the buckets rows, then the runs' rows; a stable
	// sort by table keeps that (and each part's key order) either way.
	bySrc := func(a, b storedBucket) int { return a.src - b.src }
	if !slices.IsSortedFunc(all, bySrc) {
		slices.SortStableFunc(all, bySrc)
	}
	split, _ := slices.BinarySearchFunc(all, 1, func(b storedBucket, src int) int { return b.src - src })
	table, staged := all[:split], all[split:]
	// Each part comes in key order from its own ORDER BY; sorted again only
	// if SQLite did not keep that order through the UNION ALL.
	byKey := func(a, b storedBucket) int { return strings.Compare(a.key, b.key) }
	for _, part := range [][]storedBucket{table, staged} {
		if !slices.IsSortedFunc(part, byKey) {
			slices.SortStableFunc(part, byKey)
		}
	}
	// The keys this read is complete for: up to the table's last row if it
	// was cut off, and below the runs' last key if they were.
	tableCut, stagedCut := len(table) == limit, len(staged) == runLimit
	within := func(key string) bool {
		return (!tableCut || key <= table[len(table)-1].key) && (!stagedCut || key < staged[len(staged)-1].key)
	}
	i, j := 0, 0
	for i < len(table) || j < len(staged) {
		var key string
		switch {
		case j == len(staged) || (i < len(table) && table[i].key <= staged[j].key):
			key = table[i].key
		default:
			key = staged[j].key
		}
		if !within(key) {
			return true, nil
		}
		var newest *storedBucket
		if i < len(table) && table[i].key == key {
			newest = &table[i]
			i++
		}
		for ; j < len(staged) && staged[j].key == key; j++ {
			if newest == nil || staged[j].seq > newest.seq {
				newest = &staged[j]
			}
		}
		if !pb.add(newest) {
			return true, nil
		}
	}
	return tableCut || stagedCut, nil
}

// readScratch holds what readMerged reads rows into, pooled across reads.
type readScratch struct {
	all []storedBucket
	sc  storedScanner
}

var readScratchPool = sync.Pool{New: func() any { return new(readScratch) }}

// put empties rs, letting go of the keys it pointed to, and pools it.
func (rs *readScratch) put() {
	clear(rs.all)
	rs.all = rs.all[:0]
	rs.sc.buf, rs.sc.ends = rs.sc.buf[:0], rs.sc.ends[:0]
	readScratchPool.Put(rs)
}

// pageBuilder fills a hydration page, packed or not, with the live buckets
// it is given, up to half of NATS's max_payload: any reply may travel in
// parts, but a page that fits one message keeps hydration to one round
// trip per page and the worker from holding large replies for it.
type pageBuilder struct {
	log    *slog.Logger
	page   bus.BucketsPage
	packed bool
	now    int64
	budget int
	size   int
	read   int    // keys taken, live or not
	live   int    // keys added to the page
	last   string // the last key taken
	bin    []byte
	// sizeHint is the packed buffer's first capacity.
	sizeHint int
}

// newPageBuilder starts a page; a packed one's buffer is made for
// sizeHint bytes (it grows if it must).
func (r *bucketReader) newPageBuilder(packed bool, now int64, sizeHint int) *pageBuilder {
	budget := max(int(r.maxPayload())/2, 4096)
	return &pageBuilder{log: r.log, packed: packed, now: now, budget: budget, sizeHint: min(budget, sizeHint)}
}

// add takes b's key, adding b to the page unless it is full again (no
// longer live); it reports false, taking nothing, when the page has no
// room left.
func (pb *pageBuilder) add(b *storedBucket) bool {
	if b.fullAt <= pb.now {
		pb.read++
		pb.last = b.key
		return true
	}
	if pb.size+len(b.key)+len(b.tenant)+len(b.state)+64 > pb.budget && pb.size > 0 {
		return false
	}
	pb.size += len(b.key) + len(b.tenant) + len(b.state) + 64
	pb.live++
	pb.read++
	pb.last = b.key
	var err error
	if pb.packed {
		if pb.page.Packed == nil {
			// Not the budget's size: the budget counts more than a
			// packed record takes, and a first touch asks for one key.
			// A buffer of the budget's size (4 MiB) was cleared for
			// each.
			pb.page.Packed = make([]byte, 0, pb.sizeHint)
		}
		pb.bin, err = bus.BinaryState(pb.bin[:0], b.state)
		if err == nil {
			pb.page.Packed = bus.AppendPacked(pb.page.Packed, b.key, b.tenant, b.fullAt, pb.bin)
		}
	} else {
		rec := bus.BucketRecord{Key: b.key, TenantID: b.tenant, FullAt: b.fullAt}
		rec.Limits, rec.States, err = bus.DecodeState(b.state)
		if err == nil {
			pb.page.Buckets = append(pb.page.Buckets, rec)
		}
	}
	if err != nil {
		pb.log.Error("skipping unreadable bucket", "key", b.key, "err", err)
	}
	return true
}
