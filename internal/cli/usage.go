package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	f, err := parseUsageFlags(e, args)
	if err != nil {
		return err
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	out := usageOutput{w: e.Stdout, group: f.group, asJSON: f.asJSON}
	if f.asCSV {
		out.csv = service.NewUsageCSV(e.Stdout)
	}
	if err := fetchUsage(ctx, tc, f.query(), out.page); err != nil {
		return err
	}
	return out.flush()
}

// usageFlags are sluice usage's flags, checked.
type usageFlags struct {
	from, to, group string
	asCSV, asJSON   bool
	limit           int
}

// parseUsageFlags reads and checks sluice usage's flags; --month becomes
// --from and --to.
func parseUsageFlags(e *env, args []string) (usageFlags, error) {
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
		return usageFlags{}, err
	}
	switch {
	case len(pos) > 0:
		return usageFlags{}, usageError("unexpected argument %q", pos[0])
	case *group != service.UsageByKey && *group != service.UsageByPolicy:
		return usageFlags{}, usageError("--group %q: must be key or policy", *group)
	case *limit < 0:
		return usageFlags{}, usageError("--page %d: must be positive", *limit)
	case *asCSV && *asJSON:
		return usageFlags{}, usageError("--csv and --json: give one or the other")
	case *month != "" && (*from != "" || *to != ""):
		return usageFlags{}, usageError("--month and --from/--to: give one or the other")
	}
	if *month != "" {
		first, err := time.Parse("2006-01", *month)
		if err != nil {
			return usageFlags{}, usageError("--month %q: must be a month such as 2027-01", *month)
		}
		*from, *to = first.Format(time.DateOnly), first.AddDate(0, 1, -1).Format(time.DateOnly)
	}
	return usageFlags{from: *from, to: *to, group: *group, asCSV: *asCSV, asJSON: *asJSON, limit: *limit}, nil
}

// query is the first page's query.
func (f usageFlags) query() url.Values {
	q := url.Values{"group": {f.group}}
	if f.from != "" {
		q.Set("from", f.from)
	}
	if f.to != "" {
		q.Set("to", f.to)
	}
	if f.limit > 0 {
		q.Set("limit", strconv.Itoa(f.limit))
	}
	return q
}

// usagePage is one page of GET /v1/usage.
type usagePage struct {
	From, To   string
	TimeZone   string             `json:"time_zone"`
	Total      int64              `json:"total"`
	Rows       []service.UsageRow `json:"usage"`
	NextCursor string             `json:"next_cursor"`
}

// fetchUsage asks for every page of GET /v1/usage from q on, following
// the cursor, and hands each, raw and decoded, to each in order.
func fetchUsage(ctx context.Context, tc *client, q url.Values, each func(raw json.RawMessage, page *usagePage) error) error {
	var page usagePage
	for {
		page.Rows, page.NextCursor = nil, ""
		var raw json.RawMessage
		if _, err := tc.do(ctx, "GET", "/v1/usage?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("GET /v1/usage: the answer is not what Sluice sends: %v", err)
		}
		if err := each(raw, &page); err != nil {
			return err
		}
		if page.NextCursor == "" {
			return nil
		}
		if page.NextCursor == q.Get("cursor") || len(page.Rows) == 0 {
			return fmt.Errorf("GET /v1/usage: a page made no progress; is --url a Sluice server?")
		}
		q.Set("cursor", page.NextCursor)
	}
}

// usageOutput prints usage pages in one of three forms: each page's JSON,
// the API's CSV file, or the range and its total then a table.
type usageOutput struct {
	w      io.Writer
	group  string
	asJSON bool
	csv    *service.UsageCSV
	tw     *tabwriter.Writer
}

// page prints one page.
func (o *usageOutput) page(raw json.RawMessage, page *usagePage) error {
	switch {
	case o.asJSON:
		fmt.Fprintf(o.w, "%s\n", raw)
	case o.csv != nil:
		if err := o.csv.Write(page.Rows); err != nil {
			return err
		}
	case o.tw == nil:
		// The first page names the range the server chose.
		fmt.Fprintf(o.w, "Usage from %s to %s (%s): %d %s\n", page.From, page.To, page.TimeZone, page.Total, plural(int(page.Total), "unit", "units"))
		o.tw = tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0)
		if o.group == service.UsageByKey {
			fmt.Fprintln(o.tw, "DAY\tKEY\tPOLICY\tUNITS")
		} else {
			fmt.Fprintln(o.tw, "DAY\tPOLICY\tUNITS")
		}
	}
	if o.tw != nil {
		for _, r := range page.Rows {
			if o.group == service.UsageByKey {
				fmt.Fprintf(o.tw, "%s\t%s\t%s\t%d\n", r.Day, keyLabel(r), r.Policy, r.Units)
			} else {
				fmt.Fprintf(o.tw, "%s\t%s\t%d\n", r.Day, r.Policy, r.Units)
			}
		}
	}
	return nil
}

// flush ends the output: the CSV file's or the table's buffered rows.
func (o *usageOutput) flush() error {
	switch {
	case o.csv != nil:
		return o.csv.Flush()
	case o.tw != nil:
		return o.tw.Flush()
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
