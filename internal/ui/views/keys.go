package views

import (
	"net/url"
	"strconv"
)

// revokedHidden says how many revoked keys the list leaves out.
func revokedHidden(n int) string {
	if n == 1 {
		return "1 revoked key hidden"
	}
	return strconv.Itoa(n) + " revoked keys hidden"
}

// showRevokedURL is the keys list with revoked keys shown, keeping the
// filter and tier.
func showRevokedURL(filter, tier string) string {
	q := url.Values{"revoked": {"1"}}
	if filter != "" {
		q.Set("q", filter)
	}
	if tier != "" {
		q.Set("tier", tier)
	}
	return "/ui/keys?" + q.Encode()
}

// pageRange is "1–50 of 10 000".
func pageRange(p KeysPage) string {
	return FormatCount(int64(p.From)) + "–" + FormatCount(int64(p.To)) + " of " + FormatCount(int64(p.Of))
}
