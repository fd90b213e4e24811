package api

// The API's routes, one small type per resource, each over the shared
// handler (its configuration, authentication and helpers).

type (
	// tenantRoutes serves tenants: the operator's tenant management and a tenant's own settings.
	tenantRoutes struct{ *handler }
	// blockRoutes serves the operator's abuse report and blocks.
	blockRoutes struct{ *handler }
	// auditRoutes serves the audit log, a tenant's and the operator's.
	auditRoutes struct{ *handler }
	// decisionRoutes serves checks and batches of checks, with their reservations.
	decisionRoutes struct{ *handler }
	// settleRoutes serves settling reservations.
	settleRoutes struct{ *handler }
	// releaseRoutes serves releasing the leases of concurrency limits.
	releaseRoutes struct{ *handler }
	// policyRoutes serves policies and bucket resets.
	policyRoutes struct{ *handler }
	// keyRoutes serves consumer keys.
	keyRoutes struct{ *handler }
	// analyticsRoutes serves analytics: time series and top callers.
	analyticsRoutes struct{ *handler }
	// usageRoutes serves usage to bill from.
	usageRoutes struct{ *handler }
	// envoyRoutes serves Envoy rate limit configurations.
	envoyRoutes struct{ *handler }
	// serviceKeyRoutes serves service keys, a tenant's own and the operator's.
	serviceKeyRoutes struct{ *handler }
	// webhookRoutes serves webhook endpoints and their deliveries.
	webhookRoutes struct{ *handler }
	// jwtIssuerRoutes serves JWT issuers.
	jwtIssuerRoutes struct{ *handler }
	// customerRoutes serves customers and the keys each holds.
	customerRoutes struct{ *handler }
)
