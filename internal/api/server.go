// Package api is Sluice's public HTTP API (API.md) on Echo: thin handlers
// that parse, call the engine or the worker, and encode. One error handler
// turns every failure, Echo's own included, into the API's error envelope.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// MaxBody is the largest request body accepted (API.md: 1 MiB).
const MaxBody = 1 << 20

// Engine is what the API needs from the data plane.
type Engine interface {
	Check(ctx context.Context, tenantID string, req *engine.CheckRequest, now time.Time) (engine.Answer, error)
	CheckBatch(ctx context.Context, tenantID string, reqs []engine.CheckRequest, now time.Time) ([]engine.Answer, error)
	TenantForServiceKey(key string) (string, bool)
	TenantSuspended(tenantID string) bool
	OperatorTokenHash() string
	Ready() bool
	// Healthy is what /readyz answers (engine.Engine.Healthy).
	Healthy() bool
	WaitVersion(ctx context.Context, v int64)
	// PeekCaller reads a caller's buckets without taking anything.
	PeekCaller(tenantID string, who engine.Caller, now time.Time) (engine.CallerState, error)
	// Settle applies a settled reservation's difference, reserved at since,
	// to its buckets.
	Settle(ctx context.Context, r reserve.Reservation, now time.Time) error
	// GiveBack returns an estimate taken for a reservation never recorded.
	GiveBack(ctx context.Context, tenantID string, h reserve.Hold, estimate int64, now time.Time) error
	// Release gives back the slot of a concurrency limit's lease.
	Release(ctx context.Context, tenantID, lease string, now time.Time) (engine.Released, error)
}

// Config wires the API.
type Config struct {
	Engine Engine
	// Services are the worker's config and analytics (bus.NewServices
	// over NATS).
	Services service.Services
	// Gatherer is served at /metrics to the operator token only; the
	// server's --metrics-addr listener serves it without a token.
	Gatherer prometheus.Gatherer
	// Transport decides which requests came over HTTPS (HSTS, Secure
	// cookies).
	Transport httpsec.Transport
	Now       func() time.Time
	Log       *slog.Logger
	// TrustedProxies are the peers whose X-Forwarded-For the forward-auth
	// endpoint believes; from any other peer the peer is the client.
	TrustedProxies []netip.Prefix
	// Tarpit, if set, slows the refusals (429) of a tenant, or of an
	// address not signed in, that keeps asking past its limit.
	Tarpit *httpsec.Tarpit
	// CheckJWKSURL, if set, checks where an issuer's jwks_url points
	// before it is stored (engine.JWKSURLChecker).
	CheckJWKSURL func(ctx context.Context, url string) error
}

type handler struct {
	Config
	reserves reserveLimiter
	settles  heldOff
	// configWrites remembers the worker's refusals of a tenant's config
	// writes (heldConfigWrites).
	configWrites heldOff
}

// New returns the Echo instance serving the API. Other packages (the
// dashboard) may add their routes to it.
func New(cfg Config) *echo.Echo {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &handler{Config: cfg}
	h.reserves.now, h.reserves.held.what, h.settles.what = cfg.Now, "reserve", "settle"
	h.configWrites.what = "config write"
	if cfg.Services.Reservations != nil {
		h.Services.Reservations = heldReservations{Reservations: cfg.Services.Reservations, creates: &h.reserves.held, settles: &h.settles}
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = h.errorHandler
	e.Use(middleware.Recover())
	// Router-level middleware wraps Echo's own 404 and 405 answers too, so
	// every answer carries the security headers and the body limit.
	e.Use(httpsec.Headers(cfg.Transport))
	e.Use(limitBody)

	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", h.readyz)
	if cfg.Gatherer != nil {
		// Metrics name tenants' policies and reveal traffic: the operator's.
		e.GET("/metrics", h.operatorAuth(echo.WrapHandler(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))))
	}

	// Middleware is attached per route, not per group: an Echo group with
	// middleware answers 404 for every unknown method under it, and API.md
	// wants 405 for a known path with the wrong method. Handlers are wrapped
	// once here rather than passed to Echo as route middleware, which Echo
	// would apply anew (allocating) on every request.
	// Each resource's routes are a small type over the shared handler.
	tenant := tenantRoutes{h}
	block := blockRoutes{h}
	audit := auditRoutes{h}
	decision := decisionRoutes{h}
	settle := settleRoutes{h}
	release := releaseRoutes{h}
	policy := policyRoutes{h}
	key := keyRoutes{h}
	analytics := analyticsRoutes{h}
	usage := usageRoutes{h}
	envoy := envoyRoutes{h}
	serviceKey := serviceKeyRoutes{h}
	webhook := webhookRoutes{h}
	jwtIssuer := jwtIssuerRoutes{h}
	customer := customerRoutes{h}
	e.GET(OpenAPIPath, h.openAPIDoc)
	decide := func(f echo.HandlerFunc) echo.HandlerFunc { return h.requireJSON(h.serviceAuth(f)) }
	// Config routes carry the service key's prefix to the audit log.
	svc := func(f echo.HandlerFunc) echo.HandlerFunc {
		return h.requireJSON(h.serviceAuth(h.withActor(serviceKeyActor, h.heldConfigWrites(f))))
	}
	e.POST("/v1/check", decide(decision.check))
	// Proxies send their subrequest with the client's method (nginx) or
	// GET (Caddy, Traefik), and no body: any method is accepted.
	e.Any(ForwardAuthPath, h.forwardAuth)
	e.POST("/v1/check/batch", decide(decision.checkBatch))
	e.POST("/v1/settle", decide(settle.settle))
	e.POST("/v1/release", decide(release.release))
	e.POST("/v1/policies", svc(policy.createPolicy))
	e.GET("/v1/policies", svc(policy.listPolicies))
	e.GET("/v1/policies/:id", svc(policy.getPolicy))
	e.PUT("/v1/policies/:id", svc(policy.updatePolicy))
	e.DELETE("/v1/policies/:id", svc(policy.deletePolicy))
	e.POST("/v1/keys", svc(key.createKey))
	e.GET("/v1/keys", svc(key.listKeys))
	e.GET("/v1/keys/:id", svc(key.getKey))
	e.GET("/v1/keys/:id/usage", svc(usage.keyUsage))
	e.PATCH("/v1/keys/:id", svc(key.updateKey))
	e.DELETE("/v1/keys/:id", svc(key.revokeKey))
	e.POST("/v1/buckets/reset", svc(policy.resetBucket))
	e.GET("/v1/analytics/timeseries", svc(analytics.timeseries))
	e.GET("/v1/analytics/top", svc(analytics.top))
	e.GET("/v1/usage", svc(usage.usage))
	e.POST("/v1/envoy/configs", svc(envoy.applyEnvoyConfig))
	e.GET("/v1/envoy/configs/:domain", svc(envoy.getEnvoyConfig))
	e.GET("/v1/tenant", svc(tenant.tenantSelf))
	e.PATCH("/v1/tenant", svc(tenant.tenantPatchSelf))
	e.GET("/v1/service-keys", svc(serviceKey.tenantListServiceKeys))
	e.POST("/v1/service-keys", svc(serviceKey.tenantCreateServiceKey))
	e.DELETE("/v1/service-keys/:id", svc(serviceKey.tenantRevokeServiceKey))
	e.GET("/v1/audit", svc(audit.tenantAudit))
	e.GET("/v1/audit/:id", svc(audit.tenantAuditEntry))
	e.POST("/v1/webhooks", svc(webhook.createWebhook))
	e.GET("/v1/webhooks", svc(webhook.listWebhooks))
	e.GET("/v1/webhooks/:id", svc(webhook.getWebhook))
	e.PATCH("/v1/webhooks/:id", svc(webhook.updateWebhook))
	e.DELETE("/v1/webhooks/:id", svc(webhook.deleteWebhook))
	e.POST("/v1/webhooks/:id/rotate", svc(webhook.rotateWebhook))
	e.GET("/v1/webhooks/:id/deliveries", svc(webhook.listDeliveries))
	e.POST("/v1/webhooks/:id/deliveries/:delivery_id/resend", svc(webhook.resendDelivery))
	e.POST("/v1/jwt/issuers", svc(jwtIssuer.createIssuer))
	e.GET("/v1/jwt/issuers", svc(jwtIssuer.listIssuers))
	e.GET("/v1/jwt/issuers/:id", svc(jwtIssuer.getIssuer))
	e.PATCH("/v1/jwt/issuers/:id", svc(jwtIssuer.updateIssuer))
	e.DELETE("/v1/jwt/issuers/:id", svc(jwtIssuer.deleteIssuer))
	e.POST("/v1/customers", svc(customer.createCustomer))
	e.GET("/v1/customers", svc(customer.listCustomers))
	e.GET("/v1/customers/:id", svc(customer.getCustomer))
	e.GET("/v1/customers/:id/keys", svc(customer.customerKeys))
	e.PATCH("/v1/customers/:id", svc(customer.updateCustomer))
	e.DELETE("/v1/customers/:id", svc(customer.deleteCustomer))

	adm := func(f echo.HandlerFunc) echo.HandlerFunc {
		return h.requireJSON(h.operatorAuth(h.withActor(operatorActor, f)))
	}
	e.POST("/v1/admin/tenants", adm(tenant.createTenant))
	e.GET("/v1/admin/tenants", adm(tenant.listTenants))
	e.GET("/v1/admin/tenants/:id", adm(tenant.getTenant))
	e.DELETE("/v1/admin/tenants/:id", adm(tenant.deleteTenant))
	e.PATCH("/v1/admin/tenants/:id", adm(tenant.patchTenant))
	e.POST("/v1/admin/tenants/:id/suspend", adm(tenant.suspendTenant))
	e.POST("/v1/admin/tenants/:id/resume", adm(tenant.resumeTenant))
	e.GET("/v1/admin/abuse", adm(block.abuse))
	e.POST("/v1/admin/blocks", adm(block.createBlock))
	e.GET("/v1/admin/blocks", adm(block.listBlocks))
	e.DELETE("/v1/admin/blocks/:id", adm(block.deleteBlock))
	e.GET("/v1/admin/tenants/:id/service-keys", adm(serviceKey.adminListServiceKeys))
	e.POST("/v1/admin/tenants/:id/service-keys", adm(serviceKey.adminCreateServiceKey))
	e.DELETE("/v1/admin/tenants/:id/service-keys/:key_id", adm(serviceKey.adminRevokeServiceKey))
	e.GET("/v1/admin/audit", adm(audit.adminAudit))
	return e
}

func (h *handler) readyz(c echo.Context) error {
	if !h.Engine.Healthy() {
		return errs.Errorf(errs.Unavailable, "Not ready: the hot cache is not hydrated, NATS is not connected, or (in a cluster) this server cannot renew its leases or persist its decisions.")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// tenantKey is the context key of the authenticated tenant's id.
const tenantKey = "sluice.tenant"

// holdRefusal holds the refusal err of c's tenant, or of its client's
// address when no tenant is signed in, in the tarpit.
func (h *handler) holdRefusal(c echo.Context, err error) {
	if h.Tarpit == nil {
		return
	}
	key := "t:" + tenantID(c)
	if key == "t:" {
		key = "a:" + httpsec.ClientIP(c.Request(), h.TrustedProxies)
	}
	h.Tarpit.Hold(c.Request().Context(), key, errs.RetryAfter(err), h.Now())
}

func tenantID(c echo.Context) string { s, _ := c.Get(tenantKey).(string); return s }

func bearer(c echo.Context) (string, bool) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// serviceAuth admits a request bearing an active service key. Keys are
// looked up by their SHA-256, so the secret is never compared directly.
func (h *handler) serviceAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return errs.Errorf(errs.Unauthenticated, "Send a service key as \"Authorization: Bearer sk_...\".")
		}
		if !h.Engine.Ready() {
			return errs.Errorf(errs.Unavailable, "Sluice is starting and not ready to answer yet.")
		}
		id, ok := h.Engine.TenantForServiceKey(token)
		if !ok {
			return errs.Errorf(errs.Unauthenticated, "The service key is unknown or revoked.")
		}
		if h.Engine.TenantSuspended(id) {
			return errSuspended
		}
		c.Set(tenantKey, id)
		return next(c)
	}
}

// errSuspended refuses a valid service key of a suspended tenant.
var errSuspended = errs.Errorf(errs.Forbidden, "This tenant is suspended by the platform operator; its service keys are refused until it is resumed.")

// operatorAuth admits a request bearing the operator token, compared by
// hash in constant time.
func (h *handler) operatorAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return errs.Errorf(errs.Unauthenticated, "Send the operator token as \"Authorization: Bearer ...\".")
		}
		want := h.Engine.OperatorTokenHash()
		got := tenants.HashToken(token)
		if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
			return errs.Errorf(errs.Unauthenticated, "The operator token is not valid.")
		}
		return next(c)
	}
}

// limitBody refuses bodies over MaxBody with 413 payload_too_large. A
// declared length is checked at once. A chunked body is cut at the limit
// while it is read: decoders then answer 413 (decodeError), and a form is
// parsed here, because Echo's FormValue would drop the error and leave the
// fields empty. A body with a declared length needs no wrapping: net/http
// never reads past it.
func limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > MaxBody {
			return errTooLarge()
		}
		if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		r.Body = http.MaxBytesReader(c.Response().Writer, r.Body, MaxBody)
		mt, _, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
		var err error
		switch mt {
		case echo.MIMEApplicationForm:
			err = r.ParseForm()
		case echo.MIMEMultipartForm:
			err = r.ParseMultipartForm(MaxBody)
		}
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return errTooLarge()
		}
		return next(c)
	}
}

func errTooLarge() error {
	return errs.Errorf(errs.TooLarge, "The request body is larger than 1 MiB.")
}

// requireJSON rejects bodies that are not declared as JSON.
func (h *handler) requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength == 0 && r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
			return next(c)
		}
		ct := r.Header.Get(echo.HeaderContentType)
		if ct == "application/json" { // the common case, without parsing
			return next(c)
		}
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errs.Errorf(errs.UnsupportedMedia, "Send the body as JSON with \"Content-Type: application/json\".")
		}
		return next(c)
	}
}

// bind decodes a JSON body strictly: unknown fields, trailing data and
// type mismatches are errors that name the field.
func bind(c echo.Context, v any) error {
	return bindReader(c.Request().Body, v)
}

// bindReader decodes exactly one JSON value from r into v, refusing
// unknown fields.
func bindReader(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return errs.Errorf(errs.Invalid, "body: must hold one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errs.Errorf(errs.Invalid, "body: must hold one JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var mbe *http.MaxBytesError
	var ae *errs.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return errTooLarge()
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return errs.Errorf(errs.Invalid, "%s: must be %s", field, jsonKind(te.Type.Kind().String()))
	case errors.As(err, &se):
		return errs.Errorf(errs.Invalid, "body: malformed JSON at byte %d", se.Offset)
	case errors.Is(err, io.EOF):
		return errs.Errorf(errs.Invalid, "body: required, a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errs.Errorf(errs.Invalid, "body: truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errs.Errorf(errs.Invalid, "%s: unknown field", strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), "\""))
	}
	if strings.Contains(err.Error(), "http: request body too large") {
		return errTooLarge()
	}
	return errs.Errorf(errs.Invalid, "body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "true or false"
	case k == "slice", k == "array":
		return "an array"
	case k == "map", k == "struct":
		return "an object"
	}
	return "of another type"
}

var statusOf = map[string]int{
	errs.Invalid:          http.StatusBadRequest,
	errs.Unauthenticated:  http.StatusUnauthorized,
	errs.Forbidden:        http.StatusForbidden,
	errs.NotFound:         http.StatusNotFound,
	errs.Conflict:         http.StatusConflict,
	errs.TooLarge:         http.StatusRequestEntityTooLarge,
	errs.UnsupportedMedia: http.StatusUnsupportedMediaType,
	errs.RateLimited:      http.StatusTooManyRequests,
	errs.Unavailable:      http.StatusServiceUnavailable,
	errs.Internal:         http.StatusInternalServerError,
	codeMethodNotAllowed:  http.StatusMethodNotAllowed,
}

// codeMethodNotAllowed answers a known path with a method it does not serve.
const codeMethodNotAllowed = "method_not_allowed"

// errorHandler writes the API's error envelope for every failure and logs
// only internal ones, without ever putting their text in the body.
func (h *handler) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, msg := errs.Code(err), errs.Message(err)
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			code, msg = errs.NotFound, "No such endpoint."
		case http.StatusMethodNotAllowed:
			code, msg = codeMethodNotAllowed, "This endpoint does not accept that method."
		case http.StatusRequestEntityTooLarge:
			code, msg = errs.TooLarge, "The request body is larger than 1 MiB."
		case http.StatusUnsupportedMediaType:
			code, msg = errs.UnsupportedMedia, "Send the body as JSON with \"Content-Type: application/json\"."
		case http.StatusBadRequest:
			code, msg = errs.Invalid, "The request is malformed."
		case http.StatusUnauthorized:
			code, msg = errs.Unauthenticated, "Authentication required."
		case http.StatusForbidden:
			code, msg = errs.Forbidden, "Not allowed."
		default:
			code = errs.Internal
		}
	}
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if status >= 500 && code != errs.Unavailable {
		h.Log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		msg = "An internal error occurred."
	}
	if code == errs.RateLimited {
		h.holdRefusal(c, err)
	}
	if code == errs.RateLimited && c.Response().Header().Get("Retry-After") == "" {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(max(ceilSeconds(errs.RetryAfter(err)), 1), 10))
	}
	body := map[string]any{"error": map[string]string{"code": code, "message": msg}}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}
