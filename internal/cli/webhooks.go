package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// cmdWebhooks lists the tenant's webhook endpoints, or one endpoint's
// deliveries, newest first, every page of them (or the newest --limit).
func cmdWebhooks(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	limit := fs.Int("limit", 0, "deliveries: at most this many, newest first (default all)")
	asJSON := fs.Bool("json", false, "print the answers' JSON, one page a line")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	switch {
	case sub == "list" && len(pos) > 0:
		return usageError("unexpected argument %q", pos[0])
	case sub == "deliveries" && len(pos) != 1:
		return usageError("webhooks deliveries takes one endpoint id (sluice webhooks lists them)")
	case sub != "list" && sub != "deliveries":
		return usageError("unknown webhooks command %q (list, deliveries)", sub)
	case *limit < 0:
		return usageError("--limit %d: must be positive", *limit)
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	out := e.Stdout
	if sub == "list" {
		var ws struct {
			Webhooks []tenants.Webhook `json:"webhooks"`
		}
		if printed, err := tc.get(ctx, "/v1/webhooks", *asJSON, out, &ws); err != nil || printed {
			return err
		}
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tURL\tEVENTS\tSECRET\tSTATUS")
		for _, h := range ws.Webhooks {
			status := "active"
			if h.Paused != "" {
				status = "paused (" + h.Paused + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s…\t%s\n", h.ID, h.URL, strings.Join(h.Events, ","), h.SecretPrefix, status)
		}
		return w.Flush()
	}
	var w *tabwriter.Writer
	if !*asJSON {
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tEVENT\tSTATUS\tATTEMPTS\tCODE\tLATENCY\tLAST ATTEMPT\tERROR")
	}
	shown := 0
	q := url.Values{}
	for {
		page := min(200, *limit-shown)
		if *limit == 0 {
			page = 200
		}
		q.Set("limit", strconv.Itoa(page))
		var p struct {
			Deliveries []tenants.WebhookDelivery `json:"deliveries"`
			NextBefore int64                     `json:"next_before"`
		}
		var raw json.RawMessage
		if _, err := tc.do(ctx, "GET", "/v1/webhooks/"+url.PathEscape(pos[0])+"/deliveries?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("GET deliveries: the answer is not what Sluice sends: %v", err)
		}
		if *asJSON {
			fmt.Fprintf(out, "%s\n", raw) // each page as it came, and on to the next
		}
		for _, d := range p.Deliveries {
			if w == nil {
				break
			}
			code, last := "-", "-"
			if d.ResponseCode != 0 {
				code = strconv.Itoa(d.ResponseCode)
			}
			if d.LastAttemptAt != nil {
				last = d.LastAttemptAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%dms\t%s\t%s\n", d.ID, d.Event, d.Status, d.Attempts, code, d.LatencyMS, last, oneLine(d.LastError))
		}
		shown += len(p.Deliveries)
		if p.NextBefore == 0 || len(p.Deliveries) == 0 || (*limit > 0 && shown >= *limit) {
			break
		}
		q.Set("before", strconv.FormatInt(p.NextBefore, 10))
	}
	if w != nil {
		return w.Flush()
	}
	return nil
}

// oneLine keeps a message on its table row.
func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}
