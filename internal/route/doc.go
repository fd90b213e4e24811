// Package route finds the policy a request is for: it normalizes a
// request's target (percent-decoding, dot segments, duplicate and trailing
// slashes, matrix parameters, a format suffix, case, repeated query
// parameters) so that no spelling of a path escapes its policy, and matches
// it against a tenant's compiled policy patterns (Router).
//
// Like quota, it is pure logic: the standard library only, no I/O, no
// clock. Normalizing and matching cost time linear in the target, whatever
// its shape (TestWorkIsLinear).
package route
