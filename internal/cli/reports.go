package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"
)

// cmdAbuse prints the operator's abuse report: identities across tenants
// ranked by denials, over the last 24 hours unless told otherwise.
func cmdAbuse(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	since := fs.Duration("since", 0, "the report covers this long up to now (e.g. 1h); default 24h")
	from := fs.String("from", "", "the range's start, RFC 3339")
	to := fs.String("to", "", "the range's end, RFC 3339 (default now)")
	limit := fs.Int("limit", 20, "how many identities, 1–1000")
	asJSON := fs.Bool("json", false, "print the answer's JSON")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	switch {
	case *since < 0:
		return usageError("--since %s: must be positive", *since)
	case *since > 0 && (*from != "" || *to != ""):
		return usageError("--since and --from/--to: give one or the other")
	case *since > 0:
		q.Set("from", time.Now().Add(-*since).UTC().Format(time.RFC3339))
	}
	for name, v := range map[string]string{"from": *from, "to": *to} {
		if v == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			return usageError("--%s %q: must be an RFC 3339 time such as 2027-01-01T00:00:00Z", name, v)
		}
		q.Set(name, v)
	}
	oc, err := e.operator("sluice abuse")
	if err != nil {
		return err
	}
	path := "/v1/admin/abuse?" + q.Encode()
	var rep struct {
		From       time.Time `json:"from"`
		To         time.Time `json:"to"`
		Identities []struct {
			TenantName string `json:"tenant_name"`
			Identity   struct {
				Kind string `json:"kind"`
				ID   string `json:"id"`
			} `json:"identity"`
			Allowed     int64     `json:"allowed"`
			Denied      int64     `json:"denied"`
			DenialRatio float64   `json:"denial_ratio"`
			FirstSeen   time.Time `json:"first_seen"`
			LastSeen    time.Time `json:"last_seen"`
		} `json:"identities"`
	}
	if printed, err := oc.get(ctx, path, *asJSON, e.Stdout, &rep); err != nil || printed {
		return err
	}
	fmt.Fprintf(e.Stdout, "Denials from %s to %s\n", rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339))
	if len(rep.Identities) == 0 {
		fmt.Fprintln(e.Stdout, "No identity was denied.")
		return nil
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tKIND\tIDENTITY\tDENIED\tALLOWED\tRATIO\tFIRST SEEN\tLAST SEEN")
	for _, r := range rep.Identities {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%.0f%%\t%s\t%s\n", r.TenantName, r.Identity.Kind, r.Identity.ID, r.Denied, r.Allowed,
			100*r.DenialRatio, r.FirstSeen.UTC().Format(time.RFC3339), r.LastSeen.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}
