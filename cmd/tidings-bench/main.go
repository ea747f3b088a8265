// Command tidings-bench measures the relay and the notification dispatcher
// against a PostgreSQL server, next to pgbench scripts that emulate the
// same transactions, so every figure is also a ratio to what the server
// itself can do on the same machine in the same run.
//
//	go run ./cmd/tidings-bench [-database URL] [-only drain,steady,...] [-runs 3]
//
// Scenarios (-only picks some; all run by default, in this order):
//   - ceiling: pgbench scripts on a pre-filled copy of the outbox and
//     inbox tables: one delivery transaction (claim one row with SKIP
//     LOCKED, insert its inbox claim, mark it processed, commit), the same
//     with 50 rows per transaction, and the staging insert with and
//     without its NOTIFY; when the drain runs too, the two delivery
//     scripts run at the start of each of its rounds instead, beside the
//     drains they are the ceilings of;
//   - stage: staging commits/s with 1, 8 and 32 writers, one request per
//     transaction, a session listening: without the wake-up
//     (Outbox.WithoutWakeUp), with the NOTIFY in the transaction, and
//     with the NOTIFY after the commit (relay.Waker);
//   - steady: requests staged one per transaction at each fixed -rate
//     while the relay runs; commit-to-delivery-start latency for each
//     wake-up path (LISTEN, LISTEN with a relay.Waker, short polling,
//     both), next to a raw LISTEN/NOTIFY floor;
//   - drain: -events requests staged in advance, drained through
//     relay.Supervise and notification.Dispatcher with an in-memory
//     delivery answering Delivered, for each commit setting (each, shared,
//     or the default CommitAuto with a delivery that declares
//     delivery.RepeatDropped or RepeatSends), BatchSize and Concurrency
//     given, with -rules also with every recipient rule on; every request
//     is checked delivered once;
//   - sustain: a drain long enough to last -sustain, its rate per -window,
//     and what each window cost: PostgreSQL's CPU per event split into
//     the client sessions', autovacuum's and the background processes',
//     the WAL per event, the checkpoints and autovacuum passes, and the
//     CPU the hypervisor gave other machines;
//   - backlog: drains of each -backlog size with the relay in a child
//     process whose peak RSS is sampled from /proc.
//
// Without -database it starts a throwaway PostgreSQL cluster from the
// local binaries with fsync and synchronous_commit on, and removes it on
// exit. It refuses a server that does not flush its commits: a figure
// measured with durability off says nothing about production. Each
// scenario works in a fresh schema of its own, dropped afterwards.
//
// Progress goes to stderr; the machine, the settings, the results and the
// performance issue's targets with a verdict each, as Markdown tables, go
// to stdout. With -out DIR the report also goes to DIR/report.md, next to
// the SVG charts it links (latency against offered rate, drain rate per
// setting against the ceiling, the sustained drain per window, CPU per
// event per setting) and results.json, the medians a later run's
// -baseline can read.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if childArg, ok := childConfigArg(os.Args[1:]); ok {
		err = runChild(ctx, childArg)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout)
	}
	stop()
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tidings-bench:", err)
		os.Exit(1)
	}
}
