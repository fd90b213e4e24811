package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/service"
)

// cmdUsage prints the tenant's daily usage over a range (by default the
// current month in the tenant's zone, which the server chooses), every
// page of the export: the range and its total, then a table; or the API's
// CSV file, or each page's JSON.
func cmdUsage(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	from := fs.String("from", "", "the first day, a date such as 2027-01-01 or an RFC 3339 time (default: the month's first)")
	to := fs.String("to", "", "the last day, included (default: today, or --from's month's last with --month)")
	month := fs.String("month", "", "a whole month, 2027-01, instead of --from/--to")
	group := fs.String("group", service.UsageByKey, "key: a row per day, key and policy; policy: a row per day and policy")
	asCSV := fs.Bool("csv", false, "print the API's CSV file instead of a table")
	asJSON := fs.Bool("json", false, "print each page's JSON, one a line")
	limit := fs.Int("page", 0, "rows per request (default the server's, 100000)")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageError("unexpected argument %q", pos[0])
	case *group != service.UsageByKey && *group != service.UsageByPolicy:
		return usageError("--group %q: must be key or policy", *group)
	case *limit < 0:
		return usageError("--page %d: must be positive", *limit)
	case *asCSV && *asJSON:
		return usageError("--csv and --json: give one or the other")
	case *month != "" && (*from != "" || *to != ""):
		return usageError("--month and --from/--to: give one or the other")
	}
	if *month != "" {
		first, err := time.Parse("2006-01", *month)
		if err != nil {
			return usageError("--month %q: must be a month such as 2027-01", *month)
		}
		*from, *to = first.Format(time.DateOnly), first.AddDate(0, 1, -1).Format(time.DateOnly)
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	q := url.Values{"group": {*group}}
	if *from != "" {
		q.Set("from", *from)
	}
	if *to != "" {
		q.Set("to", *to)
	}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var cw *service.UsageCSV
	var tw *tabwriter.Writer
	if *asCSV {
		cw = service.NewUsageCSV(e.Stdout)
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
		var raw json.RawMessage
		if _, err := tc.do(ctx, "GET", "/v1/usage?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("GET /v1/usage: the answer is not what Sluice sends: %v", err)
		}
		switch {
		case *asJSON:
			fmt.Fprintf(e.Stdout, "%s\n", raw)
		case cw != nil:
			if err := cw.Write(page.Rows); err != nil {
				return err
			}
		case tw == nil:
			// The first page names the range the server chose.
			fmt.Fprintf(e.Stdout, "Usage from %s to %s (%s): %d %s\n", page.From, page.To, page.TimeZone, page.Total, plural(int(page.Total), "unit", "units"))
			tw = tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
			if *group == service.UsageByKey {
				fmt.Fprintln(tw, "DAY\tKEY\tPOLICY\tUNITS")
			} else {
				fmt.Fprintln(tw, "DAY\tPOLICY\tUNITS")
			}
		}
		if tw != nil {
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
	switch {
	case cw != nil:
		return cw.Flush()
	case tw != nil:
		return tw.Flush()
	}
	return nil
}

// keyLabel names a usage row's key: its name and prefix, or the callers
// without a key.
func keyLabel(r service.UsageRow) string {
	switch {
	case r.KeyID == "":
		return "(callers without a key)"
	case r.KeyName == "":
		return r.KeyID
	}
	return r.KeyName + " (" + r.KeyPrefix + ")"
}
