package webhook

// Where a webhook may point: package netguard's rules, with the URL's
// form checked by tenants.ValidateWebhookURL.

import (
	"context"
	"net/netip"

	"github.com/sluicehq/sluice/internal/netguard"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Resolver looks a host's addresses up (net.DefaultResolver).
type Resolver = netguard.Resolver

// Ports are the ports a webhook may use when private addresses are not
// allowed.
var Ports = netguard.Ports

// errRefused is the dialer's refusal of an address: what the tenant sees
// of it never names the address (describe).
var errRefused = netguard.ErrRefused

// control is the dialer's check of the address it is about to connect
// to, after resolution.
var control = netguard.Control

// Forbidden says why a delivery may not go to addr, or "" when it may
// (netguard.Forbidden).
func Forbidden(addr netip.Addr) string { return netguard.Forbidden(addr) }

// CheckURL checks a webhook URL: its form (tenants.ValidateWebhookURL)
// and, unless allowPrivate, that every address its host resolves to is
// public. Errors name the field url.
func CheckURL(ctx context.Context, r Resolver, raw string, allowPrivate bool) error {
	u, err := tenants.ValidateWebhookURL(raw)
	if err != nil {
		return err
	}
	return netguard.CheckHost(ctx, r, u, "url", "webhooks", allowPrivate)
}
