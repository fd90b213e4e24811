package app

import (
	"io"
	"testing"
)

func TestLogFormatFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
		err  bool
	}{
		{nil, nil, "auto", false},
		{nil, map[string]string{"SLUICE_LOG_FORMAT": "json"}, "json", false},
		{[]string{"--log-format", "text"}, map[string]string{"SLUICE_LOG_FORMAT": "json"}, "text", false},
		{[]string{"--log-format", "pretty"}, nil, "", true},
	} {
		cfg := DefaultConfig()
		cfg.Data = t.TempDir()
		err := cfg.ParseFlags("server", c.args, func(k string) string { return c.env[k] }, io.Discard)
		if (err != nil) != c.err || (err == nil && cfg.LogFormat != c.want) {
			t.Errorf("%v %v: format %q, err %v; want %q (error %v)", c.args, c.env, cfg.LogFormat, err, c.want, c.err)
		}
	}
}
