// Package recording provides a [delivery.Delivery] for tests, in the spirit
// of [net/http/httptest.ResponseRecorder]: a [Delivery] records every
// request it is handed and answers from a script.
//
// Use it to drive the dispatcher without a provider, and to assert on what
// the dispatcher handed: [Delivery.Wait] blocks until a number of requests
// arrived, [Delivery.Count] says how many times one request was handed
// ("delivered exactly once"), and the Script methods make chosen requests
// answer Retry or Reject.
package recording
