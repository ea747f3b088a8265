package mail

import "time"

// SetMaxConnAge sets how long d keeps a connection after it was opened,
// instead of 5 minutes.
func SetMaxConnAge(d *Delivery, age time.Duration) {
	d.pool.maxAge = age
}

// Failure is failure, for a test of the moment a connection's deadline
// has fired and its context's timer not yet.
var Failure = failure
