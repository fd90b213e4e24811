package sqlitedb

/*
#include <stdlib.h>
#include <stdint.h>
#ifdef __GLIBC__
#include <malloc.h>
static int sluice_malloc_trim(void) { return malloc_trim(0); }
static void sluice_malloc_tune(void) {
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);
	mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
}
static int sluice_mallinfo(size_t out[2]) {
	struct mallinfo2 mi = mallinfo2();
	out[0] = mi.uordblks + mi.hblkhd; // in use, in the arenas and in blocks of their own
	out[1] = mi.fordblks;             // free, kept in the arenas
	return 1;
}
#else
static int sluice_malloc_trim(void) { return 0; }
static void sluice_malloc_tune(void) {}
static int sluice_mallinfo(size_t out[2]) { return 0; }
#endif
// SQLite is linked into the binary by the driver; this reads its own
// count of the memory it has allocated.
extern int64_t sqlite3_memory_used(void);
*/
import "C"

import "sync"

// ReleaseMemory hands the C heap's free pages back to the operating system.
// SQLite's page caches live in the C heap; when connections close after a
// burst, glibc keeps the freed memory in its arenas, so the
// process's resident memory stays at its peak although nothing uses it. It
// reports whether anything was released; elsewhere than glibc it does
// nothing.
func ReleaseMemory() bool {
	return C.sluice_malloc_trim() != 0
}

var tuneOnce sync.Once

// tuneMalloc fixes glibc's thresholds for giving memory back, once per
// process, before SQLite allocates. By default glibc raises them as large
// blocks are freed, up to 32 MiB for mmap and 64 MiB for trimming, and
// malloc_trim does not shrink the free top of arenas other than the main
// one, where SQLite's allocations from many threads land: after a burst
// those tops kept 60-100 MiB of freed page cache resident. With the
// thresholds fixed, blocks of 256 KiB and more are mapped on their own and
// unmapped when freed, and an arena's free top beyond 1 MiB is handed back
// as it is freed.
func tuneMalloc() { tuneOnce.Do(func() { C.sluice_malloc_tune() }) }

// CHeap is the C heap's use: SQLite's page caches and statements, and
// whatever else the process allocates outside Go.
type CHeap struct {
	// SQLite is what SQLite has allocated now, by its own count.
	SQLite int64
	// Known is false elsewhere than glibc: the two fields below are 0.
	Known bool
	// InUse is allocated; Free is kept in the allocator's arenas, freed
	// but not unmapped (some of its pages may be handed back already).
	InUse, Free int64
}

// ReadCHeap reads the C heap's use. It walks the allocator's arenas under
// their locks: fine for a metrics scrape, not for a hot path.
func ReadCHeap() CHeap {
	h := CHeap{SQLite: int64(C.sqlite3_memory_used())}
	var out [2]C.size_t
	if C.sluice_mallinfo(&out[0]) != 0 {
		h.Known = true
		h.InUse, h.Free = int64(out[0]), int64(out[1])
	}
	return h
}
