package app

import (
	"io"
	"testing"
)

func TestPublicURLAndMetricsAddr(t *testing.T) {
	parse := func(args []string, env map[string]string) (Config, error) {
		c := DefaultConfig()
		err := c.ParseFlags("server", args, func(k string) string { return env[k] }, io.Discard)
		return c, err
	}
	c, err := parse(nil, map[string]string{"SLUICE_PUBLIC_URL": "https://sluice.example.com", "SLUICE_METRICS_ADDR": "0.0.0.0:9090"})
	if err != nil || c.PublicURL != "https://sluice.example.com" || c.MetricsAddr != "0.0.0.0:9090" || !c.transport().PublicHTTPS {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	c, err = parse([]string{"--public-url", "http://127.0.0.1:8080"}, map[string]string{"SLUICE_PUBLIC_URL": "https://ignored.example.com"})
	if err != nil || c.transport().PublicHTTPS {
		t.Fatalf("the flag wins, and http is not https: %+v, %v", c, err)
	}
	if c, err := parse(nil, nil); err != nil || c.transport().PublicHTTPS || c.MetricsAddr != "" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"--public-url", "sluice.example.com"},
		{"--public-url", "ftp://sluice.example.com"},
		{"--public-url", "https://"},
		{"--metrics-addr", "9090"},
	} {
		if _, err := parse(args, nil); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
