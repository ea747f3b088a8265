package retrypolicy_test

import (
	"fmt"
	"time"

	"github.com/tidings-go/tidings/retrypolicy"
)

func ExamplePolicy_Delay() {
	policy := retrypolicy.Policy{
		MaxAttempts: 6,
		BaseDelay:   time.Second,
		MaxDelay:    10 * time.Second,
		// A RandFunc that always returns 0 leaves every delay at its full
		// value. Leave RandFunc nil in production so that delays are spread.
		RandFunc: func() float64 { return 0 },
	}
	if err := policy.Validate(); err != nil {
		fmt.Println(err)
		return
	}

	// attempts is the count of failed attempts stored on the outbox row.
	for attempts := 1; ; attempts++ {
		if policy.Exhausted(attempts) {
			fmt.Printf("attempt %d failed: dead\n", attempts)
			break
		}
		fmt.Printf("attempt %d failed: retry in %v\n", attempts, policy.Delay(attempts))
	}

	// Output:
	// attempt 1 failed: retry in 1s
	// attempt 2 failed: retry in 2s
	// attempt 3 failed: retry in 4s
	// attempt 4 failed: retry in 8s
	// attempt 5 failed: retry in 10s
	// attempt 6 failed: dead
}
