package retrypolicy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

const (
	// MaxAttemptsDefault is the number of failed attempts after which a
	// request is dead when Policy.MaxAttempts is zero.
	MaxAttemptsDefault = 10

	// BaseDelayDefault is the delay after the first failed attempt when
	// Policy.BaseDelay is zero.
	BaseDelayDefault = 15 * time.Second

	// MultiplierDefault is the factor by which the delay grows after each
	// further failed attempt when Policy.Multiplier is zero.
	MultiplierDefault = 2.0

	// MaxDelayDefault caps every delay when Policy.MaxDelay is zero.
	MaxDelayDefault = time.Hour

	// JitterDefault is the fraction of each delay that is randomised when
	// Policy.Jitter is zero: a delay is drawn from 75–100 % of its value.
	JitterDefault = 0.25
)

// Policy says how many times a request that answered "retry" is offered
// again, and after which delay. It is exponential backoff with a cap and
// jitter: the delay after n failed attempts is
//
//	min(BaseDelay * Multiplier^(n-1), MaxDelay) * (1 - Jitter*r)
//
// with r drawn from [0, 1) by RandFunc.
//
// The zero value of every field means its default, so the zero Policy is
// ready to use. Policy is a value with no internal state; its methods are safe
// for concurrent use if RandFunc is. Check a Policy built from configuration
// with [Policy.Validate].
type Policy struct {
	// MaxAttempts is the number of failed attempts after which the request is
	// dead. Zero means MaxAttemptsDefault (10). It must not be negative.
	MaxAttempts int

	// BaseDelay is the delay after the first failed attempt, before jitter.
	// Zero means BaseDelayDefault (15 s). It must not be negative.
	BaseDelay time.Duration

	// Multiplier is the factor by which the delay grows after each further
	// failed attempt. Zero means MultiplierDefault (2). When set it must be a
	// finite number of at least 1; 1 gives a constant delay.
	Multiplier float64

	// MaxDelay caps every delay; the cap applies before jitter. Zero means
	// MaxDelayDefault (1 h). It must not be negative, and after defaults it
	// must not be less than BaseDelay.
	MaxDelay time.Duration

	// Jitter is the fraction of each delay that is randomised: a delay d
	// becomes a value in (d*(1-Jitter), d]. Zero means JitterDefault (0.25).
	// When set it must be in (0, 1]. Jitter cannot be turned off, so that
	// requests that failed together are spread out when they are retried.
	Jitter float64

	// RandFunc returns the random number r in [0, 1) that scales the jitter.
	// Nil means Float64 from math/rand/v2, which is safe for concurrent use.
	// Set it to make the policy deterministic in tests; the methods of Policy
	// are safe for concurrent use only if RandFunc is.
	RandFunc func() float64
}

// Validate reports whether every field is in range, returning an error that
// names each field that is not, or nil. The zero Policy is valid.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("retrypolicy: MaxAttempts is %d, must not be negative", p.MaxAttempts))
	}
	if p.BaseDelay < 0 {
		errs = append(errs, fmt.Errorf("retrypolicy: BaseDelay is %v, must not be negative", p.BaseDelay))
	}
	if p.Multiplier != 0 && !(p.Multiplier >= 1 && !math.IsInf(p.Multiplier, 1)) {
		errs = append(errs, fmt.Errorf("retrypolicy: Multiplier is %v, must be a finite number of at least 1", p.Multiplier))
	}
	if p.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("retrypolicy: MaxDelay is %v, must not be negative", p.MaxDelay))
	}
	if p.Jitter != 0 && !(p.Jitter > 0 && p.Jitter <= 1) {
		errs = append(errs, fmt.Errorf("retrypolicy: Jitter is %v, must be in (0, 1]", p.Jitter))
	}
	if p.BaseDelay >= 0 && p.MaxDelay >= 0 {
		d := p.withDefaults()
		if d.MaxDelay < d.BaseDelay {
			errs = append(errs, fmt.Errorf("retrypolicy: MaxDelay is %v, must not be less than BaseDelay (%v)", d.MaxDelay, d.BaseDelay))
		}
	}
	return errors.Join(errs...)
}

// Exhausted reports whether a request that has failed attempts times is dead,
// that is whether attempts has reached MaxAttempts.
func (p Policy) Exhausted(attempts int) bool {
	return attempts >= p.withDefaults().MaxAttempts
}

// Attempts returns the number of failed attempts after which a request is
// dead: MaxAttempts, or its default.
func (p Policy) Attempts() int {
	return p.withDefaults().MaxAttempts
}

// Span returns the longest time a request can wait between its first and
// its last attempt: the delays after every failed attempt but the last,
// before jitter. It saturates at the largest time.Duration. A retention of
// anything that must outlive a request's retries is longer than this.
func (p Policy) Span() time.Duration {
	p = p.withDefaults()
	var total, prev time.Duration
	for n := 1; n < p.MaxAttempts; n++ {
		d := p.capped(n)
		if d == p.MaxDelay || d == prev {
			// The delays no longer grow (the cap, or a Multiplier of 1):
			// every later one is d too.
			left := time.Duration(p.MaxAttempts - n)
			if d > 0 && left > (math.MaxInt64-total)/d {
				return math.MaxInt64
			}
			return total + left*d
		}
		if d > math.MaxInt64-total {
			return math.MaxInt64
		}
		total, prev = total+d, d
	}
	return total
}

// Delay returns how long to wait before the next attempt of a request that
// has failed attempts times. Attempts below 1 count as 1.
//
// The delay is min(BaseDelay * Multiplier^(attempts-1), MaxDelay), multiplied
// by (1 - Jitter*r) with r from RandFunc. It is computed in floating point and
// stops growing at the cap, so it never overflows, is never negative and never
// exceeds MaxDelay, for any attempts up to math.MaxInt.
func (p Policy) Delay(attempts int) time.Duration {
	p = p.withDefaults()
	maxDelay := float64(p.MaxDelay)
	d := p.unjittered(attempts) * (1 - p.Jitter*p.rand())

	// float64(p.MaxDelay) may round up past the largest time.Duration, so a
	// value that reaches it is answered with the exact cap instead of being
	// converted. NaN, possible only for a policy that fails Validate, gives 0.
	var delay time.Duration
	switch {
	case d >= maxDelay:
		delay = p.MaxDelay
	case d > 0:
		delay = time.Duration(d)
	}
	return max(delay, 0)
}

// unjittered is the delay after attempts failed attempts before jitter, in
// floating point, at most float64(MaxDelay). p has its defaults.
func (p Policy) unjittered(attempts int) float64 {
	maxDelay := float64(p.MaxDelay)
	d := float64(p.BaseDelay) * math.Pow(p.Multiplier, float64(max(attempts, 1)-1))
	if !(d < maxDelay) { // also catches +Inf
		d = maxDelay
	}
	return d
}

// capped is unjittered as a Duration: exactly MaxDelay once it reaches the
// cap. p has its defaults.
func (p Policy) capped(attempts int) time.Duration {
	d := p.unjittered(attempts)
	if d >= float64(p.MaxDelay) {
		return p.MaxDelay
	}
	return max(time.Duration(d), 0)
}

// withDefaults returns a copy of p with every zero field set to its default.
func (p Policy) withDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = MaxAttemptsDefault
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = BaseDelayDefault
	}
	if p.Multiplier == 0 {
		p.Multiplier = MultiplierDefault
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = MaxDelayDefault
	}
	if p.Jitter == 0 {
		p.Jitter = JitterDefault
	}
	return p
}

// rand returns the next random number for the jitter.
func (p Policy) rand() float64 {
	if p.RandFunc == nil {
		return rand.Float64()
	}
	return p.RandFunc()
}
