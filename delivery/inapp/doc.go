// Package inapp is the in-app delivery module: it writes each notification
// into an inbox table of the application's own database, and gives the
// application the calls to show users their notifications ([Delivery.List],
// [Delivery.UnreadCount]) and to mark them read ([Delivery.MarkRead],
// [Delivery.MarkAllRead]).
//
// # Exactly once
//
// Unlike a mail or SMS provider, the in-app table lives in the same
// database as the outbox, so a delivery here is exactly once, not merely
// at least once. The dispatcher calls [Delivery.Deliver] inside the
// transaction that holds the request's inbox claim, and Deliver writes its
// row through that transaction ([delivery.TxFrom]): the row and the claim
// commit together. An attempt that does not commit (it answered Retry, the
// commit failed, the process died) rolls its row back with its claim, and
// the next attempt writes it afresh; a request whose claim committed is not
// delivered again. The row's primary key is the request's id and the
// insert skips an existing row, so even a call outside the dispatcher (or
// after a claim was purged too early) cannot add a second row for one
// request.
//
// # Setup
//
// The table is not part of tidings.Migrate: create it with [Migrate], in
// the database that holds the outbox (its schema is simplest), or run
// [Migrations] with golang-migrate as a source of its own. Then register a
// Delivery with the dispatcher under a channel such as "inapp", and stage
// requests for that channel with the user's id as Recipient (see the
// package example). The dispatcher's db and the Delivery's must reach the
// same database, or the row cannot commit with the claim.
//
// # The application's calls
//
// Every call is scoped by recipient (the user id the request named): a
// user sees, counts and marks only their own notifications, and an id of
// another user's notification is ignored. Take the recipient from the
// authenticated session, never from the request a client sends. An empty
// recipient is an [ErrInvalid] error. Lists are newest first and paged with
// a [Cursor].
//
// Rows are kept until the application deletes them: this package purges
// nothing.
//
// # Concurrency
//
// A [Delivery] is safe for concurrent use by many goroutines and many
// processes: Deliver may run for many requests at once, and concurrent
// deliveries of one request serialize on the row's primary key (and, in
// the dispatcher, on the claim). MarkRead and MarkAllRead are single
// statements: a notification is marked once, keeps its first read time, and
// is counted by one call only.
package inapp
