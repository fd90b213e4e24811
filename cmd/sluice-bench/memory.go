package main

// Memory after a burst: with -settle, the worker scenario watches the
// server process's memory from before the flood until the burst's buckets
// have expired from the hot cache and from SQLite. Each step reads
// /proc/<pid>/status (anonymous and file-backed resident memory: the
// latter is SQLite's memory map of its own file, the kernel's to drop) and
// the server's /metrics (Go heap in use, what the Go runtime holds from
// the system, buckets in the hot cache, and outside Go what SQLite has
// allocated and what the C heap has in use and keeps free).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

type memoryStep struct {
	Name      string
	At        time.Duration // since the watch began
	RSS       int64
	RSSAnon   int64
	RSSFile   int64
	HeapInuse int64
	// GoHeld is what the Go runtime has from the system and has not given
	// back (go_memstats_sys_bytes less heap_released_bytes): anonymous
	// memory beyond it is the C heap's (SQLite) and the like.
	GoHeld  int64
	Buckets int64 // in the hot cache; -1 when unknown
	// Outside Go, from the worker's metrics (-1 when unknown): what
	// SQLite has allocated by its own count, and the C heap's allocated
	// and freed-but-kept bytes.
	SQLite, CInUse, CFree int64
}

type memoryWatch struct {
	mu    sync.Mutex
	start time.Time
	steps []memoryStep
	top   memoryStep
}

var (
	heapInuseRe  = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes ([0-9.e+]+)`)
	goSysRe      = regexp.MustCompile(`(?m)^go_memstats_sys_bytes ([0-9.e+]+)`)
	goReleasedRe = regexp.MustCompile(`(?m)^go_memstats_heap_released_bytes ([0-9.e+]+)`)
	hotBucketsRe = regexp.MustCompile(`(?m)^sluice_hot_cache_buckets ([0-9.e+]+)`)
	sqliteMemRe  = regexp.MustCompile(`(?m)^sluice_sqlite_memory_bytes ([0-9.e+]+)`)
	cInUseRe     = regexp.MustCompile(`(?m)^sluice_c_heap_bytes\{state="in_use"\} ([0-9.e+]+)`)
	cFreeRe      = regexp.MustCompile(`(?m)^sluice_c_heap_bytes\{state="free"\} ([0-9.e+]+)`)
)

// read takes one reading of the server's memory.
func (m *memoryWatch) read(s *benchServer, name string) memoryStep {
	st := memoryStep{Name: name, Buckets: -1, HeapInuse: -1, GoHeld: -1, SQLite: -1, CInUse: -1, CFree: -1}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				st.RSS = kb << 10
			case "RssAnon:":
				st.RSSAnon = kb << 10
			case "RssFile:":
				st.RSSFile = kb << 10
			}
		}
	}
	req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if v, ok := metricValue(heapInuseRe, b); ok {
			st.HeapInuse = int64(v)
		}
		if v, ok := metricValue(hotBucketsRe, b); ok {
			st.Buckets = int64(v)
		}
		if v, ok := metricValue(sqliteMemRe, b); ok {
			st.SQLite = int64(v)
		}
		if v, ok := metricValue(cInUseRe, b); ok {
			st.CInUse = int64(v)
		}
		if v, ok := metricValue(cFreeRe, b); ok {
			st.CFree = int64(v)
		}
		sys, ok1 := metricValue(goSysRe, b)
		released, ok2 := metricValue(goReleasedRe, b)
		if ok1 && ok2 {
			st.GoHeld = int64(sys - released)
		}
	}
	m.mu.Lock()
	if m.start.IsZero() {
		m.start = time.Now()
	}
	st.At = time.Since(m.start)
	m.mu.Unlock()
	return st
}

func metricValue(re *regexp.Regexp, b []byte) (float64, bool) {
	g := re.FindSubmatch(b)
	if g == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(g[1]), 64)
	return f, err == nil
}

// step records a named reading.
func (m *memoryWatch) step(s *benchServer, name string) memoryStep {
	st := m.read(s, name)
	m.mu.Lock()
	m.steps = append(m.steps, st)
	m.mu.Unlock()
	return st
}

// peak keeps the reading with the largest resident memory.
func (m *memoryWatch) peak(s *benchServer) {
	st := m.read(s, "peak (during the flood)")
	m.mu.Lock()
	if st.RSS > m.top.RSS {
		m.top = st
	}
	m.mu.Unlock()
}

// settle records the drained state, then reads every second for d and
// records when the hot cache has emptied, a reading every settleMark, and
// the last reading. It returns every step in order.
func (m *memoryWatch) settle(ctx context.Context, s *benchServer, d time.Duration, log io.Writer) []memoryStep {
	m.step(s, "drained")
	fmt.Fprintf(log, "watching memory for %s while the burst expires\n", d)
	end := time.Now().Add(d)
	emptied := false
	var last memoryStep
	began := time.Now()
	nextMark := settleMark
	for time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(time.Second)
		last = m.read(s, "")
		switch {
		case !emptied && last.Buckets == 0:
			emptied = true
			last.Name = "hot cache empty"
		case time.Since(began) >= nextMark && time.Until(end) > settleMark/2:
			last.Name = fmt.Sprintf("settling, %s", nextMark)
			nextMark += settleMark
		default:
			continue
		}
		m.mu.Lock()
		m.steps = append(m.steps, last)
		m.mu.Unlock()
	}
	last.Name = fmt.Sprintf("end of -settle %s", d)
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]memoryStep{}, m.steps[:1]...)
	if m.top.RSS > 0 {
		out = append(out, m.top)
	}
	out = append(out, m.steps[1:]...)
	return append(out, last)
}

// settleMark is how often the settle records a step of its own.
const settleMark = 30 * time.Second

func printMemory(w io.Writer, steps []memoryStep) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tat\tRSS\tanonymous\tfile-backed\tGo heap in use\tGo runtime holds\thot-cache buckets\t")
	for _, st := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", st.Name, round(st.At), mib(st.RSS), mib(st.RSSAnon), mib(st.RSSFile), mib(st.HeapInuse), mib(st.GoHeld), st.Buckets)
	}
	tw.Flush()
	fmt.Fprintln(w, "\noutside Go (the worker's sluice_sqlite_memory_bytes and sluice_c_heap_bytes):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tSQLite allocated\tC heap in use\tC heap free, kept\t")
	for _, st := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", st.Name, mib(st.SQLite), mib(st.CInUse), mib(st.CFree))
	}
	tw.Flush()
}
