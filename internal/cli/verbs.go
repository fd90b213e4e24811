package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/tenants"
)

// rateLimitHeaders are the headers a check's answer carries for the
// tenant's middleware to copy, in the order check prints them.
var rateLimitHeaders = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

func cmdCheck(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	var req struct {
		APIKey string `json:"api_key,omitempty"`
		IP     string `json:"ip,omitempty"`
		Method string `json:"method,omitempty"`
		Path   string `json:"path"`
		Cost   int64  `json:"cost,omitempty"`
		Peek   bool   `json:"peek,omitempty"`
	}
	fs.StringVar(&req.Path, "path", "", "the request target, as your server received it (required)")
	fs.StringVar(&req.Method, "method", "", "the request's method (default GET)")
	fs.StringVar(&req.IP, "ip", "", "the caller's IP, when it presents no consumer key")
	fs.StringVar(&req.APIKey, "api-key", "", "the caller's consumer key (ck_...)")
	fs.Int64Var(&req.Cost, "cost", 0, "what the request costs (default 1)")
	fs.BoolVar(&req.Peek, "peek", false, "answer as a check would, consuming nothing")
	exitCode := fs.Bool("exit-code", false, "exit 3 when the check is denied")
	asJSON := fs.Bool("json", false, "print the answer's JSON")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	if req.Path == "" {
		return usageError("--path is required")
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	var ans struct {
		Allowed      bool              `json:"allowed"`
		ShadowDenied bool              `json:"shadow_denied"`
		Reason       string            `json:"reason"`
		Policy       *string           `json:"policy"`
		Tier         *string           `json:"tier"`
		Identity     *tenants.Identity `json:"identity"`
		Limit        int64             `json:"limit"`
		Remaining    int64             `json:"remaining"`
		ResetMS      int64             `json:"reset_ms"`
		RetryAfterMS *int64            `json:"retry_after_ms"`
	}
	var raw json.RawMessage
	hdr, err := tc.do(ctx, "POST", "/v1/check", req, &raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("POST /v1/check: the answer is not what Sluice sends: %v", err)
	}
	out := e.Stdout
	if *asJSON {
		fmt.Fprintf(out, "%s\n", raw)
	} else {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		decision := "denied"
		if ans.Allowed {
			decision = "allowed"
		}
		if ans.ShadowDenied {
			decision += " (shadow: would have been denied)"
		}
		fmt.Fprintf(w, "decision\t%s\n", decision)
		fmt.Fprintf(w, "reason\t%s\n", ans.Reason)
		fmt.Fprintf(w, "policy\t%s\n", orDash(ans.Policy))
		fmt.Fprintf(w, "tier\t%s\n", orDash(ans.Tier))
		if ans.Identity != nil {
			fmt.Fprintf(w, "identity\t%s %s\n", ans.Identity.Kind, ans.Identity.ID)
		}
		fmt.Fprintf(w, "limit\t%d\n", ans.Limit)
		fmt.Fprintf(w, "remaining\t%d\n", ans.Remaining)
		fmt.Fprintf(w, "reset\t%s\n", time.Duration(ans.ResetMS)*time.Millisecond)
		switch {
		case ans.RetryAfterMS == nil:
			fmt.Fprintf(w, "retry after\tnever (no wait helps)\n")
		case *ans.RetryAfterMS > 0:
			fmt.Fprintf(w, "retry after\t%s\n", time.Duration(*ans.RetryAfterMS)*time.Millisecond)
		}
		_ = w.Flush()
		var lines []string
		for _, h := range rateLimitHeaders {
			if v := hdr.Get(h); v != "" {
				lines = append(lines, fmt.Sprintf("  %s: %s", h, v))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(out, "headers:\n%s\n", strings.Join(lines, "\n"))
		}
	}
	if *exitCode && !ans.Allowed {
		return &exitError{code: ExitChanges}
	}
	return nil
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// createKey issues a key with body's fields and expires (RFC 3339, "" for
// none), and prints its secret, shown once.
func createKey(ctx context.Context, e *env, tc *client, body map[string]any, expires string) error {
	if expires != "" {
		t, err := time.Parse(time.RFC3339, expires)
		if err != nil {
			return usageError("--expires-at %q: must be an RFC 3339 time such as 2027-01-01T00:00:00Z", expires)
		}
		body["expires_at"] = t
	}
	var k struct {
		tenants.ConsumerKey
		Key string `json:"key"`
	}
	if _, err := tc.do(ctx, "POST", "/v1/keys", body, &k); err != nil {
		return err
	}
	fmt.Fprintf(e.Stderr, "Created consumer key %s (%s, tier %s). Its secret, on standard output, is shown only once:\n", k.ID, k.Name, k.Tier)
	fmt.Fprintln(e.Stdout, k.Key)
	return nil
}

func cmdKeys(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	name := fs.String("name", "", "create: the key's name (who it is for)")
	tier := fs.String("tier", "", "create: the key's tier")
	expires := fs.String("expires-at", "", "create: when the key stops working, RFC 3339")
	customer := fs.String("customer", "", "create: the customer (cus_...) the key joins")
	asJSON := fs.Bool("json", false, "list: print the answer's JSON")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	switch sub {
	case "list":
		if len(pos) > 0 {
			return usageError("unexpected argument %q", pos[0])
		}
	case "create":
		if len(pos) > 0 {
			return usageError("unexpected argument %q", pos[0])
		}
		if *name == "" || *tier == "" {
			return usageError("keys create needs --name and --tier")
		}
	case "revoke":
		if len(pos) != 1 {
			return usageError("keys revoke takes one key id (sluice keys lists them)")
		}
	default:
		return usageError("unknown keys command %q (list, create, revoke)", sub)
	}
	tc, err := e.tenant()
	if err != nil {
		return err
	}
	out := e.Stdout
	switch sub {
	case "create":
		body := map[string]any{"name": *name, "tier": *tier}
		if *customer != "" {
			body["customer_id"] = *customer
		}
		return createKey(ctx, e, tc, body, *expires)
	case "revoke":
		var k tenants.ConsumerKey
		if _, err := tc.do(ctx, "DELETE", "/v1/keys/"+url.PathEscape(pos[0]), nil, &k); err != nil {
			return err
		}
		fmt.Fprintf(out, "Revoked consumer key %s (%s): its checks answer invalid_key.\n", k.ID, k.Name)
		return nil
	}
	var ks struct {
		Keys []tenants.ConsumerKey `json:"keys"`
	}
	if printed, err := tc.get(ctx, "/v1/keys", *asJSON, out, &ks); err != nil || printed {
		return err
	}
	now := time.Now()
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tPREFIX\tNAME\tTIER\tOVERRIDES\tEXPIRES\tSTATUS")
	for _, k := range ks.Keys {
		status := "active"
		switch {
		case k.RevokedAt != nil:
			status = "revoked"
		case !k.Active(now):
			status = "expired"
		}
		expiry := "-"
		if k.ExpiresAt != nil {
			expiry = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		ov := "-"
		if len(k.Overrides) > 0 {
			names := make([]string, 0, len(k.Overrides))
			for n := range k.Overrides {
				names = append(names, n)
			}
			slices.Sort(names)
			ov = strings.Join(names, ",")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.Tier, ov, expiry, status)
	}
	return w.Flush()
}

func cmdTenants(ctx context.Context, e *env, args []string) error {
	fs := e.flags()
	name := fs.String("name", "", "create: the tenant's name")
	email := fs.String("owner-email", "", "create: the owner's dashboard login")
	asJSON := fs.Bool("json", false, "list: print the answer's JSON")
	pos, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	sub := "list"
	if len(pos) > 0 {
		sub, pos = pos[0], pos[1:]
	}
	if sub != "list" && sub != "create" {
		return usageError("unknown tenants command %q (list, create)", sub)
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	password := e.Getenv("SLUICE_OWNER_PASSWORD")
	if sub == "create" && (*name == "" || *email == "" || password == "") {
		return usageError("tenants create needs --name, --owner-email and the owner's password in SLUICE_OWNER_PASSWORD")
	}
	oc, err := e.operator("sluice tenants")
	if err != nil {
		return err
	}
	out := e.Stdout
	if sub == "create" {
		var t struct {
			ID         string `json:"id"`
			Name       string `json:"name"`
			ServiceKey string `json:"service_key"`
		}
		body := map[string]string{"name": *name, "owner_email": *email, "owner_password": password}
		if _, err := oc.do(ctx, "POST", "/v1/admin/tenants", body, &t); err != nil {
			return err
		}
		fmt.Fprintf(e.Stderr, "Created tenant %s (%s). Its service key, on standard output, is shown only once:\n", t.Name, t.ID)
		fmt.Fprintln(out, t.ServiceKey)
		return nil
	}
	var ts struct {
		Tenants []tenants.TenantSummary `json:"tenants"`
	}
	if printed, err := oc.get(ctx, "/v1/admin/tenants", *asJSON, out, &ts); err != nil || printed {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tPOLICIES\tKEYS\tSERVICE KEYS\tUSERS\tCREATED")
	for _, t := range ts.Tenants {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t.ID, t.Name, t.Policies, t.ConsumerKeys, t.ServiceKeys, t.Users, t.CreatedAt.UTC().Format(time.RFC3339))
	}
	return w.Flush()
}
