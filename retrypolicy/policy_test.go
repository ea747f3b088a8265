package retrypolicy_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/retrypolicy"
)

// randLargest is the largest value a RandFunc may return, so it gives the
// shortest delay: about 75 % of the value under the default jitter.
var randLargest = math.Nextafter(1, 0)

// constRand returns a RandFunc that always answers r.
func constRand(r float64) func() float64 {
	return func() float64 { return r }
}

// defaultSchedule is the delay after each failed attempt under the zero
// Policy, before jitter.
var defaultSchedule = []time.Duration{
	15 * time.Second,
	30 * time.Second,
	1 * time.Minute,
	2 * time.Minute,
	4 * time.Minute,
	8 * time.Minute,
	16 * time.Minute,
	32 * time.Minute,
	1 * time.Hour, // 64m capped
	1 * time.Hour, // 128m capped
}

func TestPolicyDelay(t *testing.T) {
	t.Parallel()

	t.Run("DefaultScheduleWithoutJitterEffect", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{RandFunc: constRand(0)}
		for i, want := range defaultSchedule {
			require.Equal(t, want, policy.Delay(i+1), "attempts %d", i+1)
		}
	})

	t.Run("DefaultScheduleWithLargestJitter", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{RandFunc: constRand(randLargest)}
		for i, want := range defaultSchedule {
			require.InDelta(t, float64(want)*0.75, float64(policy.Delay(i+1)), float64(time.Microsecond), "attempts %d", i+1)
		}
	})

	t.Run("AttemptsBelowOneCountAsOne", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{RandFunc: constRand(0)}
		for _, attempts := range []int{0, -1, math.MinInt} {
			require.Equal(t, retrypolicy.BaseDelayDefault, policy.Delay(attempts), "attempts %d", attempts)
		}
	})

	t.Run("HugeAttemptsStayAtCap", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{RandFunc: constRand(0)}
		for _, attempts := range []int{64, 1 << 20, math.MaxInt} {
			require.Equal(t, retrypolicy.MaxDelayDefault, policy.Delay(attempts), "attempts %d", attempts)
		}
	})

	t.Run("LargestMaxDelayDoesNotOverflow", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{MaxDelay: math.MaxInt64, RandFunc: constRand(0)}
		require.Equal(t, time.Duration(math.MaxInt64), policy.Delay(math.MaxInt))
	})

	t.Run("CustomPolicy", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{
			BaseDelay:  time.Second,
			Multiplier: 3,
			MaxDelay:   time.Minute,
			Jitter:     0.5,
			RandFunc:   constRand(0.5),
		}
		// Before jitter 1s, 3s, 9s, 27s, 60s; jitter takes off a quarter.
		for i, want := range []time.Duration{750 * time.Millisecond, 2250 * time.Millisecond, 6750 * time.Millisecond, 20250 * time.Millisecond, 45 * time.Second} {
			require.Equal(t, want, policy.Delay(i+1), "attempts %d", i+1)
		}
	})

	t.Run("MultiplierOneIsConstant", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{Multiplier: 1, RandFunc: constRand(0)}
		for _, attempts := range []int{1, 2, 100, math.MaxInt} {
			require.Equal(t, retrypolicy.BaseDelayDefault, policy.Delay(attempts), "attempts %d", attempts)
		}
	})

	t.Run("FullJitterStaysPositiveOrZero", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{Jitter: 1, RandFunc: constRand(randLargest)}
		delay := policy.Delay(1)
		require.GreaterOrEqual(t, delay, time.Duration(0))
		require.Less(t, delay, time.Microsecond)
	})

	t.Run("DefaultRandFuncStaysInRange", func(t *testing.T) {
		t.Parallel()

		var policy retrypolicy.Policy
		for range 1000 {
			delay := policy.Delay(1)
			require.GreaterOrEqual(t, delay, retrypolicy.BaseDelayDefault*3/4)
			require.LessOrEqual(t, delay, retrypolicy.BaseDelayDefault)
		}
	})
}

func TestPolicyExhausted(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()

		var policy retrypolicy.Policy
		require.False(t, policy.Exhausted(0))
		require.False(t, policy.Exhausted(9))
		require.True(t, policy.Exhausted(10))
		require.True(t, policy.Exhausted(11))
	})

	t.Run("CustomMaxAttempts", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{MaxAttempts: 3}
		require.False(t, policy.Exhausted(2))
		require.True(t, policy.Exhausted(3))
	})

	t.Run("OneAttempt", func(t *testing.T) {
		t.Parallel()

		policy := retrypolicy.Policy{MaxAttempts: 1}
		require.False(t, policy.Exhausted(0))
		require.True(t, policy.Exhausted(1))
	})
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()

	t.Run("ZeroPolicyIsValid", func(t *testing.T) {
		t.Parallel()

		require.NoError(t, retrypolicy.Policy{}.Validate())
	})

	t.Run("EdgesAreValid", func(t *testing.T) {
		t.Parallel()

		for _, policy := range []retrypolicy.Policy{
			{MaxAttempts: 1, BaseDelay: 1, Multiplier: 1, MaxDelay: 1, Jitter: 1},
			{BaseDelay: time.Hour, MaxDelay: time.Hour},
			{MaxDelay: math.MaxInt64, Multiplier: math.MaxFloat64, Jitter: math.SmallestNonzeroFloat64},
		} {
			require.NoError(t, policy.Validate(), "%+v", policy)
		}
	})

	for _, tt := range []struct {
		name    string
		policy  retrypolicy.Policy
		wantErr string
	}{
		{"NegativeMaxAttempts", retrypolicy.Policy{MaxAttempts: -1}, "retrypolicy: MaxAttempts is -1, must not be negative"},
		{"NegativeBaseDelay", retrypolicy.Policy{BaseDelay: -time.Second}, "retrypolicy: BaseDelay is -1s, must not be negative"},
		{"MultiplierBelowOne", retrypolicy.Policy{Multiplier: 0.5}, "retrypolicy: Multiplier is 0.5, must be a finite number of at least 1"},
		{"NegativeMultiplier", retrypolicy.Policy{Multiplier: -2}, "retrypolicy: Multiplier is -2, must be a finite number of at least 1"},
		{"InfiniteMultiplier", retrypolicy.Policy{Multiplier: math.Inf(1)}, "retrypolicy: Multiplier is +Inf, must be a finite number of at least 1"},
		{"NaNMultiplier", retrypolicy.Policy{Multiplier: math.NaN()}, "retrypolicy: Multiplier is NaN, must be a finite number of at least 1"},
		{"NegativeMaxDelay", retrypolicy.Policy{MaxDelay: -time.Second}, "retrypolicy: MaxDelay is -1s, must not be negative"},
		{"MaxDelayBelowDefaultBaseDelay", retrypolicy.Policy{MaxDelay: 10 * time.Second}, "retrypolicy: MaxDelay is 10s, must not be less than BaseDelay (15s)"},
		{"BaseDelayAboveDefaultMaxDelay", retrypolicy.Policy{BaseDelay: 2 * time.Hour}, "retrypolicy: MaxDelay is 1h0m0s, must not be less than BaseDelay (2h0m0s)"},
		{"NegativeJitter", retrypolicy.Policy{Jitter: -0.1}, "retrypolicy: Jitter is -0.1, must be in (0, 1]"},
		{"JitterAboveOne", retrypolicy.Policy{Jitter: 1.5}, "retrypolicy: Jitter is 1.5, must be in (0, 1]"},
		{"NaNJitter", retrypolicy.Policy{Jitter: math.NaN()}, "retrypolicy: Jitter is NaN, must be in (0, 1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.EqualError(t, tt.policy.Validate(), tt.wantErr)
		})
	}

	t.Run("NamesEveryBadField", func(t *testing.T) {
		t.Parallel()

		err := retrypolicy.Policy{MaxAttempts: -1, Multiplier: 0.5, Jitter: 2}.Validate()
		require.Error(t, err)
		require.ErrorContains(t, err, "MaxAttempts")
		require.ErrorContains(t, err, "Multiplier")
		require.ErrorContains(t, err, "Jitter")
	})
}

func TestPolicySpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy retrypolicy.Policy
		want   time.Duration
	}{
		// Nine delays of 15 s doubling, the last one capped at 1 h.
		{"Defaults", retrypolicy.Policy{}, (15+30+60+120+240+480+960+1920)*time.Second + time.Hour},
		{"OneAttemptWaitsNever", retrypolicy.Policy{MaxAttempts: 1}, 0},
		{"ConstantDelay", retrypolicy.Policy{MaxAttempts: 4, BaseDelay: time.Second, Multiplier: 1}, 3 * time.Second},
		{"CappedAtOnce", retrypolicy.Policy{MaxAttempts: 5, BaseDelay: time.Minute, MaxDelay: time.Minute}, 4 * time.Minute},
		{"SaturatesInsteadOfOverflowing", retrypolicy.Policy{MaxAttempts: math.MaxInt, MaxDelay: math.MaxInt64 / 2}, math.MaxInt64},
		// Constant delays below the cap: the sum saturates too, at once
		// whatever MaxAttempts.
		{"ConstantSaturates", retrypolicy.Policy{MaxAttempts: 3000, BaseDelay: 1000 * time.Hour, MaxDelay: 2000 * time.Hour, Multiplier: 1},
			math.MaxInt64},
		{"ConstantManyAttempts", retrypolicy.Policy{MaxAttempts: math.MaxInt32, BaseDelay: time.Millisecond, Multiplier: 1},
			(math.MaxInt32 - 1) * time.Millisecond},
		{"GrowingSaturates", retrypolicy.Policy{MaxAttempts: 4, BaseDelay: 100 * 365 * 24 * time.Hour, MaxDelay: math.MaxInt64},
			math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.policy.Span())
		})
	}
}
