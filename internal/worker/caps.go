package worker

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/tenants"
)

// RegisterCapFlags adds the per-tenant cap flags to fs (--tenant-max-policies
// and so on, with SLUICE_TENANT_MAX_* environment twins read through
// getenv; the flag wins). cmd/worker and cmd/server (for its embedded
// worker) share them: the worker enforces the caps.
func RegisterCapFlags(fs *flag.FlagSet, c *tenants.Caps, getenv func(string) string) error {
	*c = c.WithDefaults()
	var bad []error
	add := func(name string, p *int, usage string) {
		flagName := "tenant-max-" + strings.ReplaceAll(name, "_", "-")
		env := "SLUICE_TENANT_MAX_" + strings.ToUpper(name)
		if v := getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				bad = append(bad, fmt.Errorf("%s: want a positive integer, not %q", env, v))
			} else {
				*p = n
			}
		}
		fs.IntVar(p, flagName, *p, usage+" ("+env+")")
	}
	add(tenants.CapPolicies, &c.Policies, "most policies one tenant may have")
	add(tenants.CapLimitsPerPolicy, &c.LimitsPerPolicy, "most limits one policy may hold, its tiers' added together")
	add(tenants.CapConsumerKeys, &c.ConsumerKeys, "most consumer keys one tenant may have issued, revoked ones included")
	add(tenants.CapServiceKeys, &c.ServiceKeys, "most active service keys one tenant may have")
	add(tenants.CapBlocks, &c.Blocks, "most blocks one tenant may have")
	add(tenants.CapMembers, &c.Members, "most dashboard logins (owners and members) one tenant may have")
	add(tenants.CapOpenReservations, &c.OpenReservations, "most open (unsettled, unexpired) reservations one tenant may hold")
	add(tenants.CapCustomers, &c.Customers, "most customers one tenant may have")
	return errors.Join(bad...)
}
