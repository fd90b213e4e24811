package sqlitedb

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static int sluice_malloc_trim(void) { return malloc_trim(0); }
#else
static int sluice_malloc_trim(void) { return 0; }
#endif
*/
import "C"

// ReleaseMemory hands the C heap's free pages back to the operating system.
// SQLite's page caches live in the C heap; when connections close after a
// burst, glibc keeps the freed memory in its arenas, so the
// process's resident memory stays at its peak although nothing uses it. It
// reports whether anything was released; elsewhere than glibc it does
// nothing.
func ReleaseMemory() bool {
	return C.sluice_malloc_trim() != 0
}
