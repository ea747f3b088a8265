// Package inbox records which events a consumer has already acted on, so a
// redelivered event has its effect once.
//
// Once claims (consumer, event id) inside the caller's own transaction. The
// claim commits or rolls back with the effect it guards: commit the effect
// and the claim together, roll both back on failure. Two transactions that
// claim the same pair at once serialize on the table's primary key: the
// second waits for the first and gets false if it committed, true if it
// rolled back.
//
// Run the claim's transaction at read committed, PostgreSQL's default. At
// repeatable read or serializable, a claim that waited for another
// transaction's commit fails with a serialization error (SQLSTATE 40001)
// instead of answering false: retry the whole transaction then.
//
// Claims must outlive the longest redelivery of their events (a lease, a
// retry schedule, a re-emit of a dead record), so their retention is longer
// than the outbox's. Purge removes a consumer's older ones in small
// batches.
package inbox
