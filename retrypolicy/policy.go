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

// Delay returns how long to wait before the next attempt of a request that
// has failed attempts times. Attempts below 1 count as 1.
//
// The delay is min(BaseDelay * Multiplier^(attempts-1), MaxDelay), multiplied
// by (1 - Jitter*r) with r from RandFunc. It is computed in floating point and
// stops growing at the cap, so it never overflows, is never negative and never
// exceeds MaxDelay, for any attempts up to math.MaxInt.
func (p Policy) Delay(attempts int) time.Duration {
	p = p.withDefaults()
	attempts = max(attempts, 1)

	maxDelay := float64(p.MaxDelay)
	d := float64(p.BaseDelay) * math.Pow(p.Multiplier, float64(attempts-1))
	if !(d < maxDelay) { // also catches +Inf
		d = maxDelay
	}
	d *= 1 - p.Jitter*p.rand()

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
