package retrypolicy_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/retrypolicy"
)

func FuzzDelay(f *testing.F) {
	// The default schedule of TestPolicyDelay, with and without jitter effect.
	for attempts := 1; attempts <= len(defaultSchedule); attempts++ {
		f.Add(attempts, int64(0), 0.0, int64(0), 0.0, 0.0)
		f.Add(attempts, int64(0), 0.0, int64(0), 0.0, randLargest)
	}
	// The custom policy of TestPolicyDelay.
	f.Add(4, int64(time.Second), 3.0, int64(time.Minute), 0.5, 0.5)
	// Attempts below 1 count as 1.
	f.Add(0, int64(0), 0.0, int64(0), 0.0, 0.5)
	f.Add(math.MinInt, int64(0), 0.0, int64(0), 0.0, 0.5)
	// Huge attempts: Multiplier^(attempts-1) is +Inf and must clamp to the cap.
	f.Add(math.MaxInt, int64(0), 0.0, int64(0), 0.0, 0.0)
	f.Add(math.MaxInt, int64(1), math.MaxFloat64, int64(math.MaxInt64), 0.0, 0.0)
	// Multiplier 1 keeps the delay at BaseDelay however many attempts.
	f.Add(math.MaxInt, int64(time.Second), 1.0, int64(0), 0.0, 0.0)
	// A multiplier just above 1 reaches the cap only after very many attempts.
	f.Add(math.MaxInt/2, int64(1), math.Nextafter(1, 2), int64(math.MaxInt64), 0.0, 0.5)
	// Jitter 1 with the largest r brings the delay down to almost 0.
	f.Add(1, int64(1), 0.0, int64(1), 1.0, randLargest)
	// The largest MaxDelay: float64(MaxDelay) rounds up to 2^63, which would
	// overflow time.Duration if converted back.
	f.Add(100, int64(math.MaxInt64), 0.0, int64(math.MaxInt64), 1e-300, 0.0)
	f.Add(100, int64(math.MaxInt64-1), 0.0, int64(math.MaxInt64), 0.0, 0.0)
	// Invalid policies: Delay must still be >= 0.
	f.Add(3, int64(-time.Second), 0.5, int64(-time.Minute), -1.0, 0.5)
	f.Add(3, int64(0), math.NaN(), int64(0), math.NaN(), 0.5)

	f.Fuzz(func(t *testing.T, attempts int, base int64, mult float64, maxDelay int64, jitter float64, r float64) {
		// RandFunc must return values in [0, 1); fold any finite r into that
		// range (math.Mod is exact) rather than skipping most inputs.
		r = math.Mod(math.Abs(r), 1)
		if math.IsNaN(r) {
			return // r is not finite: no RandFunc returns it
		}
		policy := retrypolicy.Policy{
			BaseDelay:  time.Duration(base),
			Multiplier: mult,
			MaxDelay:   time.Duration(maxDelay),
			Jitter:     jitter,
			RandFunc:   func() float64 { return r },
		}

		delay := policy.Delay(attempts)
		require.GreaterOrEqual(t, delay, time.Duration(0), "even a policy that fails Validate gets no negative delay")

		if policy.Validate() != nil {
			return
		}

		// The fields after defaults, as Delay sees them.
		if base == 0 {
			base = int64(retrypolicy.BaseDelayDefault)
		}
		if mult == 0 {
			mult = retrypolicy.MultiplierDefault
		}
		if maxDelay == 0 {
			maxDelay = int64(retrypolicy.MaxDelayDefault)
		}
		if jitter == 0 {
			jitter = retrypolicy.JitterDefault
		}

		require.LessOrEqual(t, delay, time.Duration(maxDelay), "delay above MaxDelay")

		// The first delay is at least BaseDelay before jitter, and jitter
		// takes off less than the fraction Jitter. Allow for truncation to
		// whole nanoseconds and for floating-point rounding.
		lowest := (1 - jitter) * float64(min(base, maxDelay))
		require.GreaterOrEqual(t, float64(delay), lowest*(1-1e-9)-1, "delay below (1-Jitter)*min(BaseDelay, MaxDelay)")

		// With the same r, one more failed attempt never shortens the delay.
		if attempts < math.MaxInt {
			require.LessOrEqual(t, delay, policy.Delay(attempts+1), "delay shrank after one more attempt")
		}
	})
}
