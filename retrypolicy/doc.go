// Package retrypolicy decides how many times, and how far apart, a request
// whose delivery answered "retry" is offered again.
//
// A [Policy] is pure: it holds no state and does no I/O. The number of failed
// attempts lives on the durable outbox row, not in memory, so it survives
// restarts and is shared by every instance that claims the row. The caller
// reads that count from the row, asks [Policy.Exhausted] whether the request is
// dead, and otherwise schedules the next attempt [Policy.Delay] from now.
//
// With the zero Policy, a request is tried 10 times. The delay after the
// first failed attempt is 15 s and doubles after each further one, up to a cap
// of 1 h, and every delay is randomised to 75–100 % of its value so that rows
// which failed together do not come back together.
package retrypolicy
