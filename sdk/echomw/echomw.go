// Package echomw is Sluice's quota middleware for Echo (v4). It does what
// sdk.Client.Middleware does for net/http, with the same logic: the same
// caller identification, header fields and problem answers.
package echomw

import (
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/sdk"
)

// New returns middleware that checks every request with client before the
// handler runs. Rate-limit header fields are set on every response; a
// denied request is answered with the problem body sdk.WriteProblem
// writes, and the handler is not called. Echo's own IP extraction is not
// used: the client's trusted-proxy settings decide the caller's address.
// A request admitted under a concurrency limit releases its slot when the
// handler returns, fails or panics.
//
// A client made with sdk.WithWait makes each check wait up to that long
// for its bucket instead of answering 429 at once.
func New(client *sdk.Client) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			d, _ := client.Decide(c.Request()) // failures are counted and logged by the client
			w := c.Response()
			sdk.WriteHeaders(w.Header(), d)
			if !d.Allowed {
				sdk.WriteProblem(w, d)
				return nil
			}
			if d.Lease != "" {
				// The slot of a concurrency limit is given back when the
				// handler returns, with an error or not, or panics.
				defer client.ReleaseAfter(c.Request().Context(), d)
			}
			return next(c)
		}
	}
}
