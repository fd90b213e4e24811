package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/limitsfile"
	"github.com/sluicehq/sluice/internal/tenants"
)

func cmdApply(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	file := fs.String("f", "", "the limits file (- reads standard input)")
	dryRun := fs.Bool("dry-run", false, "print what would change and change nothing")
	prune := fs.Bool("prune", false, "delete what the file does not name")
	exitCode := fs.Bool("exit-code", false, "exit 3 when there are changes (to make, or made)")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	if *file == "" {
		return usageError("name the limits file with -f")
	}
	label, data, err := e.readBytes(*file)
	if err != nil {
		return err
	}
	if isReferenceConfig(data) {
		return applyReference(ctx, e, label, data, *dryRun, *exitCode)
	}
	f, err := limitsfile.Parse(label, data, time.Now())
	if err != nil {
		return err
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	var oc *client
	if f.HasBlocks {
		if oc, err = e.operator("the file's blocks section"); err != nil {
			return err
		}
	}
	st, tenantID, err := fetchState(ctx, tc, oc, f.HasKeys, f.HasBlocks)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("tenant %s at %s", tenantID, e.url)
	plan, err := limitsfile.Diff(f, st, *prune, time.Now())
	if err != nil {
		return err
	}
	return runPlan(ctx, e, tc, oc, tenantID, plan, f.Name, where, *dryRun, *exitCode)
}

// runPlan shows a plan and, unless it is a dry run, makes its changes.
func runPlan(ctx context.Context, e *env, tc, oc *client, tenantID string, plan limitsfile.Plan, file, where string, dryRun, exitCode bool) error {
	out := e.Stdout
	if plan.Empty() {
		plan.Write(out)
		fmt.Fprintf(out, "No changes: %s already matches %s.\n", where, file)
		return nil
	}
	if dryRun {
		fmt.Fprintf(out, "Dry run: %s compared with %s; nothing is changed.\n", file, where)
		plan.Write(out)
		fmt.Fprintf(out, "Plan: %s.\n", plan.Summary())
		if exitCode {
			return &exitError{code: ExitChanges}
		}
		return nil
	}
	fmt.Fprintf(out, "Applying %s to %s:\n", file, where)
	plan.Write(out)
	done, err := execute(ctx, tc, oc, tenantID, plan)
	if err != nil {
		fmt.Fprintf(out, "Stopped after %d of %d changes.\n", done, changesToMake(plan))
		return fmt.Errorf("%w\n%d of the %d changes were made before it; fix the problem and run apply again to make the rest", err, done, changesToMake(plan))
	}
	c, u, d, _ := plan.Counts()
	fmt.Fprintf(out, "Applied: %d created, %d changed, %d deleted.\n", c, u, d)
	if exitCode {
		return &exitError{code: ExitChanges}
	}
	return nil
}

func changesToMake(p limitsfile.Plan) int {
	c, u, d, _ := p.Counts()
	return c + u + d
}

// maxFileBytes bounds a file apply reads, as the server bounds a body.
const maxFileBytes = 1 << 20

// readBytes reads a file apply takes, answering the name problems are
// reported under; "-" is standard input.
func (e *env) readBytes(name string) (string, []byte, error) {
	var r io.Reader
	label := name
	if name == "-" {
		label, r = "stdin", e.Stdin
	} else {
		label = filepath.Base(name)
		f, err := os.Open(name)
		if err != nil {
			return "", nil, fmt.Errorf("reading the limits file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return "", nil, fmt.Errorf("reading the limits file: %w", err)
	}
	if len(data) > maxFileBytes {
		return "", nil, fmt.Errorf("%s: larger than %d bytes", label, maxFileBytes)
	}
	return label, data, nil
}

// fetchState lists what the tenant has now, and answers the tenant's id,
// which its service keys carry: the output names the tenant, and blocks
// (the operator's) are listed by tenant.
func fetchState(ctx context.Context, tc, oc *client, keys, blocks bool) (limitsfile.State, string, error) {
	var st limitsfile.State
	var sks struct {
		ServiceKeys []tenants.ServiceKey `json:"service_keys"`
	}
	if _, err := tc.do(ctx, "GET", "/v1/service-keys", nil, &sks); err != nil {
		return st, "", err
	}
	if len(sks.ServiceKeys) == 0 {
		return st, "", fmt.Errorf("GET /v1/service-keys listed no key, so the tenant's id is unknown")
	}
	tenantID := sks.ServiceKeys[0].TenantID
	var pols struct {
		Policies []tenants.Policy `json:"policies"`
	}
	if _, err := tc.do(ctx, "GET", "/v1/policies", nil, &pols); err != nil {
		return st, "", err
	}
	// Descriptor policies belong to their domain's file (rlsapply.go).
	st.Policies = slices.DeleteFunc(pols.Policies, func(p tenants.Policy) bool { return p.Descriptor != nil })
	if keys {
		var ks struct {
			Keys []tenants.ConsumerKey `json:"keys"`
		}
		if _, err := tc.do(ctx, "GET", "/v1/keys", nil, &ks); err != nil {
			return st, "", err
		}
		st.Keys = ks.Keys
	}
	if blocks {
		var bs struct {
			Blocks []tenants.Block `json:"blocks"`
		}
		if _, err := oc.do(ctx, "GET", "/v1/admin/blocks?tenant_id="+url.QueryEscape(tenantID), nil, &bs); err != nil {
			return st, "", err
		}
		st.Blocks = bs.Blocks
	}
	return st, tenantID, nil
}

type blockBody struct {
	TenantID  string           `json:"tenant_id"`
	Identity  tenants.Identity `json:"identity"`
	Reason    string           `json:"reason"`
	ExpiresAt *time.Time       `json:"expires_at,omitempty"`
}

// execute applies a plan: policies are created and changed first (keys'
// overrides may name new policies), then keys and blocks, and policies are
// deleted last. It stops at the first refusal and answers how many
// changes were made.
func execute(ctx context.Context, tc, oc *client, tenantID string, plan limitsfile.Plan) (int, error) {
	done := 0
	step := func(c limitsfile.Change) error {
		var err error
		switch {
		case c.Kind == "policy" && c.Action == limitsfile.Create:
			_, err = tc.do(ctx, "POST", "/v1/policies", tenants.BodyOf(c.Policy), nil)
		case c.Kind == "policy" && c.Action == limitsfile.Update:
			_, err = tc.do(ctx, "PUT", "/v1/policies/"+url.PathEscape(c.ID), tenants.BodyOf(c.Policy), nil)
		case c.Kind == "policy" && c.Action == limitsfile.Delete:
			_, err = tc.do(ctx, "DELETE", "/v1/policies/"+url.PathEscape(c.ID), nil, nil)
		case c.Kind == "key" && c.Action == limitsfile.Update:
			_, err = tc.do(ctx, "PATCH", "/v1/keys/"+url.PathEscape(c.ID), c.Patch, nil)
		case c.Kind == "block":
			// A replace makes the new block before it lifts the old one,
			// so the identity stays blocked throughout.
			if c.Action == limitsfile.Create || c.Action == limitsfile.Replace {
				b := blockBody{TenantID: tenantID, Identity: c.Block.Identity, Reason: c.Block.Reason, ExpiresAt: c.Block.ExpiresAt}
				if _, err = oc.do(ctx, "POST", "/v1/admin/blocks", b, nil); err != nil {
					break
				}
			}
			if c.Action == limitsfile.Delete || c.Action == limitsfile.Replace {
				_, err = oc.do(ctx, "DELETE", "/v1/admin/blocks/"+url.PathEscape(c.ID), nil, nil)
			}
		default:
			return nil // not in file: nothing to do
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Kind, c.Name, err)
		}
		done++
		return nil
	}
	var last []limitsfile.Change
	for _, c := range plan.Changes {
		if c.Kind == "policy" && c.Action == limitsfile.Delete {
			last = append(last, c)
			continue
		}
		if err := step(c); err != nil {
			return done, err
		}
	}
	for _, c := range last {
		if err := step(c); err != nil {
			return done, err
		}
	}
	return done, nil
}

func cmdExport(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	output := fs.String("o", "", "write the file here instead of standard output")
	keys := fs.Bool("keys", true, "include the keys section (tiers and overrides of active consumer keys)")
	blocks := fs.Bool("blocks", false, "include the blocks section (needs the operator token)")
	domain := fs.String("domain", "", "write this domain's descriptor policies as Envoy's reference rate limit server's configuration instead")
	extras := fs.Bool("extras", false, "with --domain: keep Sluice's own fields (the reference server refuses them)")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	if *domain != "" {
		return exportReference(ctx, e, *domain, *output, *extras)
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	var oc *client
	if *blocks {
		if oc, err = e.operator("--blocks"); err != nil {
			return err
		}
	}
	st, _, err := fetchState(ctx, tc, oc, *keys, *blocks)
	if err != nil {
		return err
	}
	b, err := limitsfile.Marshal(limitsfile.FromState(st, *keys, *blocks, time.Now()))
	if err != nil {
		return err
	}
	if *output == "" {
		_, err = e.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(*output, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", *output, err)
	}
	fmt.Fprintf(e.Stderr, "Wrote %s: %d %s.\n", *output, len(st.Policies), plural(len(st.Policies), "policy", "policies"))
	return nil
}
