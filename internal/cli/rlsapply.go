package cli

import (
	"context"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/rlspolicy"
	"github.com/sluicehq/sluice/internal/tenants"
)

// isReferenceConfig reports whether data is a configuration file of
// Envoy's reference rate limit server rather than a limits file: its top
// level is a mapping with a "domain" or a "descriptors" key (docs/ENVOY.md).
// A file without a domain is the reference's, refused for its empty
// domain, not a limits file with unknown fields. The keys are read from
// the document's nodes, so a key given twice (which the reference's parser
// takes) does not hide them.
func isReferenceConfig(data []byte) bool {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return false
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		switch top.Content[i].Value {
		case "domain", "descriptors":
			return true
		}
	}
	return false
}

// applyReference applies a reference configuration file: the file is the
// whole of its domain, so the domain's descriptor policies become exactly
// the file's nodes (created, changed, and deleted when the file no longer
// has them); the tenant's other policies are left alone.
func applyReference(ctx context.Context, e *env, label string, data []byte, dryRun, exitCode bool) error {
	f, err := rlsconf.Parse(label, data)
	if err != nil {
		return err
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	have, err := listPolicies(ctx, tc)
	if err != nil {
		return err
	}
	// Every node is checked as the server checks a policy before anything
	// changes, so that a file is applied whole or not at all (short of a
	// cap on the tenant's policies or a name another policy holds).
	plan, err := rlspolicy.Diff(f, have)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("domain %q at %s", f.Domain, e.url)
	return runPlan(ctx, e, tc, nil, "", plan, label, where, dryRun, exitCode)
}

// listPolicies lists every policy of the tenant.
func listPolicies(ctx context.Context, tc *client) ([]tenants.Policy, error) {
	var pols struct {
		Policies []tenants.Policy `json:"policies"`
	}
	if _, err := tc.do(ctx, "GET", "/v1/policies", nil, &pols); err != nil {
		return nil, err
	}
	return pols.Policies, nil
}

// exportReference writes one domain's descriptor policies as a reference
// configuration file; with Sluice's own fields only when extras is set
// (the reference refuses them).
func exportReference(ctx context.Context, e *env, domain, output string, extras bool) error {
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	have, err := listPolicies(ctx, tc)
	if err != nil {
		return err
	}
	ps := tenants.DescriptorPolicies(have, domain)
	if len(ps) == 0 {
		return fmt.Errorf("the tenant has no descriptor policies of domain %q", domain)
	}
	f, err := rlspolicy.FromPolicies(domain, ps)
	if err != nil {
		return err
	}
	var b []byte
	if extras {
		b, err = rlsconf.MarshalWithExtras(f)
	} else {
		b, err = rlsconf.Marshal(f)
	}
	if err != nil {
		return fmt.Errorf("%w (export with --extras to keep Sluice's own fields; the reference server refuses them)", err)
	}
	if output == "" {
		_, err = e.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(output, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", output, err)
	}
	fmt.Fprintf(e.Stderr, "Wrote %s: domain %q, %d descriptor %s.\n", output, domain, len(ps), plural(len(ps), "node", "nodes"))
	return nil
}
