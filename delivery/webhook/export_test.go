package webhook

import "time"

// SetClock makes d read the attempt's time from now: for tests that need
// two attempts in different seconds without sleeping.
func SetClock(d *Delivery, now func() time.Time) {
	d.now = now
}
