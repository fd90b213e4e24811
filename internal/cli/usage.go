package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/service"
)

// cmdUsage prints the tenant's daily usage over a range, every page of
// the export, as a table with its total or as the API's CSV file.
func cmdUsage(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	from := fs.String("from", "", "the first day, a date such as 2027-01-01 or an RFC 3339 time (required)")
	to := fs.String("to", "", "the last day, included (default --from)")
	group := fs.String("group", service.UsageByKey, "key: a row per day, key and policy; policy: a row per day and policy")
	asCSV := fs.Bool("csv", false, "print the API's CSV file instead of a table")
	limit := fs.Int("page", 0, "rows per request (default the server's, 100000)")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageError("unexpected argument %q", pos[0])
	case *from == "":
		return usageError("--from is required")
	case *group != service.UsageByKey && *group != service.UsageByPolicy:
		return usageError("--group %q: must be key or policy", *group)
	case *limit < 0:
		return usageError("--page %d: must be positive", *limit)
	}
	if *to == "" {
		*to = *from
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	q := url.Values{"from": {*from}, "to": {*to}, "group": {*group}}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var cw *service.UsageCSV
	var tw *tabwriter.Writer
	if *asCSV {
		cw = service.NewUsageCSV(e.Stdout)
	} else {
		tw = tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
		if *group == service.UsageByKey {
			fmt.Fprintln(tw, "DAY\tKEY\tPOLICY\tUNITS")
		} else {
			fmt.Fprintln(tw, "DAY\tPOLICY\tUNITS")
		}
	}
	var page struct {
		From, To   string
		TimeZone   string             `json:"time_zone"`
		Total      int64              `json:"total"`
		Rows       []service.UsageRow `json:"usage"`
		NextCursor string             `json:"next_cursor"`
	}
	for {
		page.Rows, page.NextCursor = nil, ""
		if _, err := tc.do(ctx, "GET", "/v1/usage?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		if cw != nil {
			if err := cw.Write(page.Rows); err != nil {
				return err
			}
		} else {
			for _, r := range page.Rows {
				if *group == service.UsageByKey {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", r.Day, keyLabel(r), r.Policy, r.Units)
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", r.Day, r.Policy, r.Units)
				}
			}
		}
		if page.NextCursor == "" {
			break
		}
		if page.NextCursor == q.Get("cursor") || len(page.Rows) == 0 {
			return fmt.Errorf("GET /v1/usage: a page made no progress; is --url a Sluice server?")
		}
		q.Set("cursor", page.NextCursor)
	}
	if cw != nil {
		return cw.Flush()
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "total %d units, %s to %s (%s)\n", page.Total, page.From, page.To, page.TimeZone)
	return nil
}

// keyLabel names a usage row's key: its name and prefix, or the callers
// without a key.
func keyLabel(r service.UsageRow) string {
	switch {
	case r.KeyID == "":
		return "(no key)"
	case r.KeyName == "":
		return r.KeyID
	}
	return r.KeyName + " (" + r.KeyPrefix + ")"
}
