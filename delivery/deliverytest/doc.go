// Package deliverytest is the conformance suite every delivery module
// passes, in the spirit of Watermill's pubsub/tests and River's
// riverdrivertest: one [Run] call in the module's tests checks the parts of
// the [delivery.Delivery] contract that a module can get wrong on its own.
//
// A module's test starts a fake of its provider (an httptest.Server for an
// HTTP module, a fake SMTP server for mail, a throwaway schema for in-app)
// and wires the module to it in a setup function that returns a [Subject]:
// the Delivery, a Pending the fake accepts, the idempotency keys the fake
// received, and, for a module that calls a provider over the network
// ([Features.Remote]), switches that make the fake hang (Stall) or answer
// with an error (Fail). Run calls setup once per subtest, each with its own
// fake, and runs the subtests in parallel:
//
//   - Delivers: a valid request is Delivered, and the provider received
//     exactly one key, which contains Pending.ID.
//   - SameIDSameKey: the same request delivered twice is Delivered twice
//     under two equal keys, so a provider that dedups drops the second (a
//     module that Dedups itself leaves one key).
//   - CancelledContextIsRetry: a cancelled context is a Retry, never
//     Delivered or Reject; a remote module sends nothing.
//   - TimeoutIsRetry (remote): against a provider that hangs, Deliver
//     honours a 200 ms deadline, returning a Retry within 5 s.
//   - ProviderErrorsStayOutOfReasons (remote): a provider's 500 is a Retry
//     and its 400 a Retry or a Reject, and neither reason quotes the
//     provider's body (the suite plants a marker, the recipient, the
//     secrets, the template data and a template secret in it).
//
// Every outcome the suite gets is also checked for what a reason must never
// hold, since reasons are stored in failure_reason and logged: the
// recipient, any of [Subject.Secrets], any of Pending.Secrets (the suite
// adds one to every request, as a verification code would be) and any
// string of Pending.Data of 4 bytes or more (shorter ones match innocent
// text such as a status code).
// A delivered outcome's reference is checked the same way. The search
// ignores case.
//
// The package's own test, deliverytest_test.go, is the worked example: a
// small HTTP module built on delivery/internal/httpcall, its fake provider
// and its setup function pass the suite, and modules with typical faults
// (quoting the provider's body, forgetting the idempotency key, naming the
// recipient, ignoring the deadline) fail the check that guards against each.
package deliverytest
