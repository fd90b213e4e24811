// Package cli is the sluice command: limits as code (apply and export a
// limits file, docs/LIMITS.md) and a few everyday verbs (tenants, keys,
// check, usage, webhooks, abuse), all through a running server's HTTP API.
//
// Credentials come from the environment (SLUICE_SERVICE_KEY for a tenant,
// SLUICE_OPERATOR_TOKEN for the operator); flags exist for both but put
// the secret in the shell history and the process list, so the
// environment is preferred.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/limitsfile"
)

// Exit codes (docs/LIMITS.md).
const (
	ExitOK      = 0 // done: nothing to change, or changed as asked
	ExitError   = 1 // the file has problems, the server refused, or it is unreachable
	ExitUsage   = 2 // unknown verb or flag, a missing argument or credential
	ExitChanges = 3 // with --exit-code: apply or the dry run found changes; check was denied
)

// DefaultURL is the server the command talks to without --url or
// SLUICE_URL: the server's own default address.
const DefaultURL = "http://127.0.0.1:8080"

// IO is where a run reads and writes, and its environment.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (os.Getenv in main).
	Getenv func(string) string
}

const usage = `sluice talks to a Sluice server's HTTP API.

Limits as code:
  sluice apply -f limits.yaml [--dry-run] [--prune] [--exit-code]
                                     make the tenant match the file
  sluice export [-o limits.yaml] [--keys=false] [--blocks]
  sluice apply -f ratelimit.yaml    Envoy's reference rate limit server's file (it has a domain)
  sluice export --domain NAME [--extras] [-o ratelimit.yaml]
                                     write the tenant's configuration as a file

Everyday verbs:
  sluice check --path /api/x [--ip 203.0.113.7 | --api-key ck_...] [--method GET] [--cost 1] [--peek]
                                     one check: the decision and its headers
  sluice keys [list]                 the tenant's consumer keys
  sluice keys create --name NAME --tier TIER [--expires-at 2027-01-01T00:00:00Z] [--customer cus_...]
  sluice keys revoke ID
  sluice customers [list] [--search TEXT] [--json]
                                     the tenant's customers, every page of them
  sluice customers create --external-id ID --tier TIER [--name NAME]
  sluice customers delete ID         (a customer that holds no keys)
  sluice usage [--month 2027-01 | --from 2027-01-01 --to 2027-01-31] [--group key|policy] [--csv | --json]
                                     units per day to bill from (default: this month in the
                                     tenant's zone), every page of them
  sluice webhooks [list]             the tenant's webhook endpoints
  sluice webhooks deliveries ID [--limit N]
                                     an endpoint's deliveries, newest first
  sluice tenants [list]              every tenant (operator)
  sluice tenants create --name NAME --owner-email EMAIL
                                     (the owner's password from SLUICE_OWNER_PASSWORD)
  sluice abuse [--since 1h | --from T --to T] [--limit 20] [--json]
                                     identities across tenants ranked by denials (operator;
                                     default: the last 24 hours)

Connection (every verb):
  --url URL        the server (env SLUICE_URL, default http://127.0.0.1:8080)
  --timeout D      how long one request may take (default 30s)
  credentials      SLUICE_SERVICE_KEY (tenant verbs), SLUICE_OPERATOR_TOKEN (operator verbs,
                   blocks); --service-key and --operator-token exist, the environment is preferred

Exit codes: 0 done, 1 error, 2 usage, 3 changes found or made (apply --exit-code),
or denied (check --exit-code). The file format: docs/LIMITS.md.
`

// Run runs one sluice command line (without the program name) and answers
// its exit code.
func Run(ctx context.Context, args []string, io IO) int {
	if len(args) == 0 {
		fmt.Fprint(io.Stderr, usage)
		return ExitUsage
	}
	verb, rest := args[0], args[1:]
	var run func(context.Context, *env, []string) error
	switch verb {
	case "apply":
		run = cmdApply
	case "export":
		run = cmdExport
	case "check":
		run = cmdCheck
	case "keys":
		run = cmdKeys
	case "customers":
		run = cmdCustomers
	case "tenants":
		run = cmdTenants
	case "abuse":
		run = cmdAbuse
	case "usage":
		run = cmdUsage
	case "webhooks":
		run = cmdWebhooks
	case "help", "-h", "-help", "--help":
		fmt.Fprint(io.Stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(io.Stderr, "sluice: unknown command %q\n\n%s", verb, usage)
		return ExitUsage
	}
	e := &env{IO: io, verb: verb}
	err := run(ctx, e, rest)
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(io.Stdout, usage)
		return ExitOK
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintf(io.Stderr, "sluice %s: %s\n", verb, ee.msg)
		}
		return ee.code
	}
	if ps, ok := limitsfile.IsProblems(err); ok {
		for _, p := range ps {
			fmt.Fprintln(io.Stderr, p)
		}
		fmt.Fprintf(io.Stderr, "sluice %s: %d %s in the file; nothing was applied\n", verb, len(ps), plural(len(ps), "problem", "problems"))
		return ExitError
	}
	fmt.Fprintf(io.Stderr, "sluice %s: %v\n", verb, err)
	return ExitError
}

// exitError ends a run with a code other than ExitError, or with a message
// already printed (msg empty).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...) + " (sluice help)"}
}

// env is one run: its IO and the connection flags every verb takes.
type env struct {
	IO
	verb string

	url, serviceKey, operatorToken string
	timeout                        time.Duration
}

// flags returns a flag set for the verb with the connection flags on it.
func (e *env) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+e.verb, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() { fmt.Fprintln(e.Stderr, "Run \"sluice help\" for usage.") }
	fs.StringVar(&e.url, "url", "", "the Sluice server (env SLUICE_URL)")
	fs.StringVar(&e.serviceKey, "service-key", "", "the tenant's service key (prefer SLUICE_SERVICE_KEY)")
	fs.StringVar(&e.operatorToken, "operator-token", "", "the operator token (prefer SLUICE_OPERATOR_TOKEN)")
	fs.DurationVar(&e.timeout, "timeout", 30*time.Second, "how long one request may take")
	return fs
}

// parse parses args, allowing flags after positional arguments
// ("keys revoke ID --url …").
func (e *env) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &exitError{code: ExitUsage}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if e.url == "" {
		e.url = e.Getenv("SLUICE_URL")
	}
	if e.url == "" {
		e.url = DefaultURL
	}
	if !strings.HasPrefix(e.url, "http://") && !strings.HasPrefix(e.url, "https://") {
		return nil, usageError("--url %q: must start with http:// or https://", e.url)
	}
	return pos, nil
}

// tenant is a client with the service key.
func (e *env) tenant() (*client, error) {
	key, from := e.serviceKey, "the service key (--service-key)"
	if key == "" {
		key, from = e.Getenv("SLUICE_SERVICE_KEY"), "the service key (SLUICE_SERVICE_KEY)"
	}
	if key == "" {
		return nil, usageError("set SLUICE_SERVICE_KEY to the tenant's service key (sk_...)")
	}
	return newClient(e.url, key, from, e.timeout), nil
}

// operator is a client with the operator token.
func (e *env) operator(why string) (*client, error) {
	tok, from := e.operatorToken, "the operator token (--operator-token)"
	if tok == "" {
		tok, from = e.Getenv("SLUICE_OPERATOR_TOKEN"), "the operator token (SLUICE_OPERATOR_TOKEN)"
	}
	if tok == "" {
		return nil, usageError("%s needs the operator: set SLUICE_OPERATOR_TOKEN", why)
	}
	return newClient(e.url, tok, from, e.timeout), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
