// Command sluice manages a Sluice tenant through a server's HTTP API:
// limits as code (apply, export) and everyday verbs (check, keys,
// tenants). Run "sluice help" for usage; docs/LIMITS.md has the file
// format.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
