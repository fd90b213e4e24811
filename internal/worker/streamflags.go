package worker

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// StreamLimitFlags adds --stream-max-bytes and --stream-max-age (and their
// SLUICE_STREAM_MAX_BYTES and SLUICE_STREAM_MAX_AGE twins) to fs, for the
// worker, embedded or not. The returned function reads them once fs is
// parsed.
func StreamLimitFlags(fs *flag.FlagSet, getenv func(string) string) func() (bus.StreamLimits, error) {
	def := func(k, v string) string {
		if e := getenv(k); e != "" {
			return e
		}
		return v
	}
	maxBytes := fs.String("stream-max-bytes", def("SLUICE_STREAM_MAX_BYTES", "1GiB"),
		"most bytes each of the state and counter streams holds; at the bound servers' flushes are refused and they keep their states and retry; -1 = no bound (SLUICE_STREAM_MAX_BYTES)")
	maxAge := fs.String("stream-max-age", def("SLUICE_STREAM_MAX_AGE", "168h"),
		"how long an unapplied stream message is kept before it expires (a backstop for a worker down for days); -1 = no bound (SLUICE_STREAM_MAX_AGE)")
	return func() (bus.StreamLimits, error) {
		var l bus.StreamLimits
		b, err := parseBytes(*maxBytes)
		if err != nil || (b >= 0 && b < 1<<20) {
			return l, fmt.Errorf("--stream-max-bytes %q: want a size of at least 1MiB such as 512MiB or 4GiB, or -1 for no bound", *maxBytes)
		}
		l.MaxBytes = b
		if strings.TrimSpace(*maxAge) == "-1" {
			l.MaxAge = -1
		} else if l.MaxAge, err = time.ParseDuration(*maxAge); err != nil || l.MaxAge < time.Minute {
			return l, fmt.Errorf("--stream-max-age %q: want a duration of at least 1m such as 24h, or -1 for no bound", *maxAge)
		}
		return l, nil
	}
}

// parseBytes reads a byte count: a whole number with an optional KiB, MiB
// or GiB suffix (or -1).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "-1" {
		return -1, nil
	}
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, suffix)), m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
