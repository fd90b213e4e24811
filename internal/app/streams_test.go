package app

import (
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

// The stream bounds come from flags or their SLUICE_* twins, default to
// bus's defaults, take -1 for no bound, and refuse nonsense.
func TestStreamLimitFlags(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", args, func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	c, err := parse(nil, nil)
	if mb, age := c.Streams.Resolved(); err != nil || mb != bus.DefaultStreamMaxBytes || age != bus.DefaultStreamMaxAge {
		t.Fatalf("defaults: %d %s, %v", mb, age, err)
	}
	c, err = parse([]string{"--stream-max-bytes", "512MiB"}, map[string]string{"SLUICE_STREAM_MAX_BYTES": "4GiB", "SLUICE_STREAM_MAX_AGE": "24h"})
	if err != nil || c.Streams.MaxBytes != 512<<20 || c.Streams.MaxAge != 24*time.Hour {
		t.Fatalf("flag over environment: %+v, %v", c.Streams, err)
	}
	c, err = parse([]string{"--stream-max-bytes", "-1", "--stream-max-age", "-1"}, nil)
	if mb, age := c.Streams.Resolved(); err != nil || mb != 0 || age != 0 {
		t.Fatalf("no bounds: %d %s, %v", mb, age, err)
	}
	for _, args := range [][]string{
		{"--stream-max-bytes", "12"},
		{"--stream-max-bytes", "lots"},
		{"--stream-max-bytes", "1TB"},
		{"--stream-max-age", "5s"},
		{"--stream-max-age", "forever"},
	} {
		if _, err := parse(args, nil); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
