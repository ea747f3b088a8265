// Package feedback receives what providers report about the messages the
// delivery modules sent: bounces, complaints, unsubscribes, delivery
// confirmations and push receipts. It verifies each report on its raw
// body, turns it into [Report] values with a [Class] and a reason code,
// and hands them to a [Store] that stages them, keyed by the provider's
// event id, in the caller's transaction. It stores nothing and applies
// nothing itself.
package feedback
