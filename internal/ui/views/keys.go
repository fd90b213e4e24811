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

// showRevokedURL is the keys list with revoked keys shown, keeping filter.
func showRevokedURL(filter string) string {
	q := url.Values{"revoked": {"1"}}
	if filter != "" {
		q.Set("q", filter)
	}
	return "/ui/keys?" + q.Encode()
}
