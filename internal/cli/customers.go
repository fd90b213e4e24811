package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/tenants"
)

// cmdCustomers lists the tenant's customers, every page of them (those
// --search keeps), creates one, or deletes one that holds no keys.
func cmdCustomers(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	externalID := fs.String("external-id", "", "create: your own id for the customer (unique in the tenant)")
	name := fs.String("name", "", "create: the customer's name")
	tier := fs.String("tier", "", "create: the customer's tier")
	search := fs.String("search", "", "list: keep customers whose external id, name or tier contains it")
	asJSON := fs.Bool("json", false, "list: print the answers' JSON, one page a line")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	switch {
	case (sub == "list" || sub == "create") && len(pos) > 0:
		return usageError("unexpected argument %q", pos[0])
	case sub == "create" && (*externalID == "" || *tier == ""):
		return usageError("customers create needs --external-id and --tier")
	case sub == "delete" && len(pos) != 1:
		return usageError("customers delete takes one customer id (sluice customers lists them)")
	case sub != "list" && sub != "create" && sub != "delete":
		return usageError("unknown customers command %q (list, create, delete)", sub)
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	out := e.Stdout
	switch sub {
	case "create":
		body := map[string]any{"external_id": *externalID, "tier": *tier}
		if *name != "" {
			body["name"] = *name
		}
		var c tenants.Customer
		if _, err := tc.do(ctx, "POST", "/v1/customers", body, &c); err != nil {
			return err
		}
		fmt.Fprintf(out, "Created customer %s (%s, tier %s). Keys join it with: sluice keys create --customer %s ...\n", c.ID, c.ExternalID, c.Tier, c.ID)
		return nil
	case "delete":
		if _, err := tc.do(ctx, "DELETE", "/v1/customers/"+url.PathEscape(pos[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(out, "Deleted customer %s.\n", pos[0])
		return nil
	}
	return listCustomers(ctx, e, tc, *search, *asJSON)
}

// listCustomers prints every page of the tenant's customers that search
// keeps, as a table or each page's JSON.
func listCustomers(ctx context.Context, e *env, tc *client, search string, asJSON bool) error {
	w := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(w, "ID\tEXTERNAL ID\tNAME\tTIER\tCREATED")
	}
	for offset := 0; ; {
		q := url.Values{"limit": {strconv.Itoa(tenants.MaxCustomerPage)}, "offset": {strconv.Itoa(offset)}}
		if search != "" {
			q.Set("search", search)
		}
		var raw json.RawMessage
		if _, err := tc.do(ctx, "GET", "/v1/customers?"+q.Encode(), nil, &raw); err != nil {
			return err
		}
		var page tenants.CustomerPage
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("GET /v1/customers: the answer is not what Sluice sends: %v", err)
		}
		if asJSON {
			fmt.Fprintf(e.Stdout, "%s\n", raw)
		}
		for _, c := range page.Customers {
			if !asJSON {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.ID, c.ExternalID, dashIfEmpty(c.Name), c.Tier, c.CreatedAt.UTC().Format("2006-01-02"))
			}
		}
		offset = page.Offset + len(page.Customers)
		if len(page.Customers) == 0 || offset >= page.Matched {
			break
		}
	}
	return w.Flush()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
