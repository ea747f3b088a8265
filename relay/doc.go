// Package relay moves records from a PostgreSQL outbox table to a sink:
// reliably, without slowing the write that staged them, and knowing nothing
// of what the records mean.
//
// A record's life:
//
//  1. Stage. Inside the application's own write transaction, Stage (or
//     StageBatch) inserts one outbox row and asks PostgreSQL to wake the
//     module's relay at commit. The row exists if and only if the write
//     commits. A message with an id of its own (Message.ID) is staged once
//     however often it is staged. It carries the trace context and baggage of the caller's
//     context and its correlation and causation ids.
//  2. Wake. Supervise runs the relay of one module. It is woken right after
//     commit (LISTEN/NOTIFY), sweeps periodically as a safety net for a lost
//     wake-up, and wakes itself when the earliest retry or lease falls due.
//     Many concurrent writers stage through Outbox.WithoutWakeUp and send
//     the wake-up after their commits through a Waker instead, because a
//     NOTIFY in the transaction makes their commits take turns.
//  3. Claim. One statement takes a batch of due rows with FOR UPDATE SKIP
//     LOCKED, leases them and counts the hand, then commits (without
//     waiting for the WAL flush: a server crash can only hand the last
//     claims again). It takes at most BatchSize rows, no more than the
//     free slots of Concurrency, and no more of a lane (Message.Lane) than
//     its room of LaneLimit (half of it for a lane a LaneSharer shares, so
//     that two of its batches are in flight), nor than 1,000, nor than the
//     sink has connections left for (Connections: one per record, or one
//     per batch of a lane a LaneSharer shares): a busy lane's rows wait
//     untouched in the table. A full lane of one connection per record
//     is claimed again once half its room is free, not record by record:
//     half of what the other lanes' connections leave it, when a lane
//     whose deliveries hang holds most of them.
//     The claim reads each lane from where the last one found the lane's
//     oldest row, or from ten seconds before the last claim, whichever is
//     earlier, and not over the rows settled there since the last vacuum;
//     at least once every SweepInterval it reads every lane from its
//     start, and finds a row staged by a transaction open for longer than
//     those ten seconds, or due further back. Concurrent relays, in one
//     process or on many machines, take different rows; a relay that dies
//     lets its leases run out and another takes the rows.
//  4. Hand. A BatchSink gets the claimed batch whole; any other Sink gets
//     each record on its own goroutine. Either way the record's context
//     carries the staging write's trace, baggage and correlation id
//     (Record.Context).
//  5. Settle. The sink's Result is recorded on the row, fenced by the hand
//     it belongs to: in a statement of the relay's, batched, or, for a
//     BatchSink, inside the sink's own transaction, so it commits with the
//     sink's work (Batch.SettleIn; the records' slots come free there,
//     together, and the next batch is claimed while that transaction
//     commits). The row becomes processed (Done),
//     pending again after a delay (Retry; the attempt is counted on the
//     row, so it survives restarts; Unsure and Later count neither an
//     attempt nor the hand, and MaxUnsure bounds Unsure), or dead (Dead).
//     A record handed more than MaxHands times, because it keeps crashing
//     or hanging its process, is dead with a reason saying so.
//  6. Operate. Outbox.ListDead shows dead records and Outbox.CountDead
//     counts them by cause, lane or module, Outbox.Reemit hands them back
//     once the cause is fixed, and Outbox.Purge removes settled records
//     after their retention (each supervisor purges its own module's).
//     Outbox.Status tells one record's story, Outbox.FindByCorrelation
//     finds the records of one write, Outbox.FindByResult the records a
//     sink processed with a result, Outbox.Stats and Outbox.Throughput
//     what is waiting and what flowed in the last minutes; the supervisor
//     observes Stats as gauges of its module (MetricDue, ...). A sink that
//     decides about records it was not handed ends pending ones with
//     Outbox.Finish, and notes what happened to settled ones later on
//     their timelines with Outbox.Note.
//
// Delivery is at least once: a sink may see a record again after a crash
// or an expired lease, so its effect must be idempotent (see package inbox).
//
// The supervisor's claim, settle and purge statements each take a pool
// connection briefly; a sink that holds a transaction open while it works
// needs one more per concurrent hand. Keep HandTimeout below the server's
// idle_in_transaction_session_timeout when the sink does so.
package relay
