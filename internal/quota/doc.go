// Package quota is Sluice's decision core: the rate-limit algorithms and
// the in-memory hot cache of buckets. Which policy a request is for is
// package route's.
//
// It is pure logic. It imports only the standard library, does no I/O, and
// never reads a clock: every decision takes the instant it is made at (unix
// nanoseconds), so tests are tables of steps at fixed instants and the same
// inputs always give the same answer.
//
// Instants are unix nanoseconds and must be positive: a State whose At is 0 is
// a never-used bucket. Time may go backwards a little between servers (clock
// skew); the algorithms never refill or slide a window for a negative elapsed
// time and never panic on it.
package quota
