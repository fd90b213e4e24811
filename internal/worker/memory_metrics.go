package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/sqlitedb"
)

// cHeapCollector exports the memory the process holds outside Go: what
// SQLite has allocated by its own count, and the C allocator's in-use and
// free-but-kept bytes. Next to the Go collector's figures they account for
// the process's anonymous resident memory.
type cHeapCollector struct {
	sqlite, heap *prometheus.Desc
}

func newCHeapCollector() *cHeapCollector {
	return &cHeapCollector{
		sqlite: prometheus.NewDesc("sluice_sqlite_memory_bytes", "Memory SQLite has allocated (page caches, statements), by its own count.", nil, nil),
		heap: prometheus.NewDesc("sluice_c_heap_bytes",
			"The C heap (SQLite's allocations among them): in_use is allocated; free is freed and kept in the allocator's arenas, some of its pages possibly handed back to the system already.", []string{"state"}, nil),
	}
}

func (c *cHeapCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sqlite
	ch <- c.heap
}

func (c *cHeapCollector) Collect(ch chan<- prometheus.Metric) {
	h := sqlitedb.ReadCHeap()
	ch <- prometheus.MustNewConstMetric(c.sqlite, prometheus.GaugeValue, float64(h.SQLite))
	if h.Known {
		ch <- prometheus.MustNewConstMetric(c.heap, prometheus.GaugeValue, float64(h.InUse), "in_use")
		ch <- prometheus.MustNewConstMetric(c.heap, prometheus.GaugeValue, float64(h.Free), "free")
	}
}
