// Package faults holds no code: it is the fault suite, tests that prove the
// guarantees of DESIGN.md (G2 at least once, G3 one effect per consumer,
// G4 idempotency key) under the faults a real service meets, against a
// real PostgreSQL and a local provider server.
//
// Every test runs a notification dispatcher (notification.NewDispatcher)
// under a relay supervisor (relay.Supervise). Its delivery posts each
// request to a provider (internal/ledger.Provider) that records what it
// receives and answers after 5-50 ms, with the request's id as the
// Idempotency-Key. Each test logs the faults it injects, with the window
// in which each happened, and ends by checking the ledger
// (internal/ledger.Check): every staged event processed, none pending or
// dead, exactly one inbox claim per event, no provider call after the
// commit of its event's claim (read from the server's commit timestamps,
// track_commit_timestamp), and every earlier duplicate the provider saw
// carrying the same key and explained by a fault that hit while the
// first delivery was in flight, no fault explaining more duplicates than
// deliveries were in flight, or by a first send the provider got only
// past the deliveries' timeout (a machine stalled for seconds), which its
// delivery had answered Retry for.
//
// The faults:
//
//   - TestSIGKILLFiveTimes: the relay process (this test binary run again
//     as a child) is killed with SIGKILL five times while 10,000 events are
//     delivered, and restarted each time.
//   - TestTerminateBackendsUnderLoad: pg_terminate_backend of every
//     session of the relay, its pool and its LISTEN session, five times a
//     second for ten seconds under load; afterwards the relay keeps up
//     again and its LISTEN session is back.
//   - TestImmediateStopAndStart: PostgreSQL stopped in immediate mode, as
//     a crash would, and started again under a relay that is never
//     restarted.
//   - TestLostWakeUp: the LISTEN session killed, and kept from coming back,
//     while events are staged: the sweep claims them within three times
//     its interval of what a wake-up took before the kill (the machine's
//     own slowness), well short of the outage, and they are delivered.
//
// Tests that stop the server or terminate its sessions run a durable
// throwaway cluster of their own (internal/pgtemp); the others use the
// test binary's shared cluster (internal/pgtest). Either way the relay and
// the test connect as pgtest's application role, which has only DML on the
// tables; the server's owner migrates, and injects the faults only it may
// (keeping a role from logging in). Set TIDINGS_FAULTS_LOG=1 to see the
// relay's and dispatcher's logs on stderr. For a longer run with faults
// injected at random, see examples/soak.
package faults
