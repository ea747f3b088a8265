// Package testwait holds the waits of the tests: each has a deadline and
// fails the test with what it waited for, so a broken guarantee is a
// failure that says so, never a test binary hanging until go test's
// timeout.
package testwait

import (
	"testing"
	"time"
)

// Within is how long a wait lasts before it fails: long enough for a
// loaded two-core machine running the race detector, short against
// go test's own timeout.
const Within = 30 * time.Second

// Recv returns the next value from ch, or fails the test when none
// arrives within Within (or the test ends), naming what it waited for.
func Recv[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return RecvWithin(tb, ch, Within, what)
}

// RecvWithin is Recv with a deadline of its own.
func RecvWithin[T any](tb testing.TB, ch <-chan T, within time.Duration, what string) T {
	tb.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatalf("waited %s for %s", within, what)
	case <-tb.Context().Done():
		tb.Fatalf("the test ended while waiting for %s", what)
	}
	panic("unreachable")
}
