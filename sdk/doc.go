// Package sdk is the Go client for Sluice, a multi-tenant quota service.
//
// A [Client] asks Sluice whether a caller may do something now ([Client.Check],
// [Client.Peek], [Client.CheckBatch]) and manages a tenant's policies, consumer
// keys and buckets. [Client.Middleware] wraps a net/http handler: it identifies
// the caller (API key, else client IP), asks Sluice, copies the rate-limit
// headers onto every response and answers denials with an
// application/problem+json body. The echomw package does the same for Echo.
//
// The package imports only the standard library.
//
// # Failure modes
//
// Every check is bounded by a timeout (100 ms by default). When Sluice cannot
// answer in time, is unreachable or answers with an error, the client returns
// a [Decision] with Reason [ReasonUnavailable]: allowed under [FailOpen] (the
// default), denied under [FailClosed]. Each such failure is counted in
// [Client.Stats] and logged, at most once per ten seconds.
//
// # Denial memory
//
// After Sluice denies a check with a positive retry_after_ms, the client
// answers the same check (same API key or IP, same method, same raw path, same
// or higher cost) locally as denied until that time has passed, at most one
// minute, without a network call. The memory only ever denies: it never
// allows a check Sluice has not allowed. See [WithDenialCache].
package sdk
