package relay

import (
	"context"
	"fmt"
	"time"
)

// settleBatchMax bounds one settle statement.
const settleBatchMax = 500

// settleLoop writes settlements until s.settles is closed. Whatever queued
// while one statement ran goes into the next: under load writes group
// themselves, and an idle relay writes each at once.
func (s *supervisor) settleLoop(ctx context.Context) {
	for first := range s.settles {
		batch := []settlement{first}
	more:
		for len(batch) < settleBatchMax {
			select {
			case st, ok := <-s.settles:
				if !ok {
					break more
				}
				batch = append(batch, st)
			default:
				break more
			}
		}
		s.flush(ctx, batch)
	}
}

// flush writes one batch, retrying while the database is away for up to a
// lease: after that the leases have run out anyway, and the records are
// handed again.
func (s *supervisor) flush(ctx context.Context, batch []settlement) {
	n := len(batch)
	args := settleArgs(batch)
	wakeAgain := false
	for _, st := range batch {
		wakeAgain = wakeAgain || st.res.outcome == outcomeRetry || st.res.outcome == outcomeRelease || st.res.outcome == outcomeUnsure
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease)
	defer cancel()
	backoff := claimBackoffMin
	for {
		var done int
		err := s.db.QueryRowContext(ctx, s.ob.q.settle, args...).Scan(&done)
		if err == nil {
			if done < n {
				s.log.DebugContext(ctx, "some settlements were fenced off by a later hand", "fenced", n-done)
			}
			break
		}
		s.log.WarnContext(ctx, "settle failed; retrying", "err", err, "records", n)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, claimBackoffMax)
		case <-ctx.Done():
			s.log.ErrorContext(ctx, "settle abandoned; the records will be handed again when their leases run out",
				"err", fmt.Errorf("%w (last: %w)", ctx.Err(), err), "records", n)
			return
		}
	}
	if wakeAgain {
		// Let the claim loop learn the new due times.
		s.poke(s.wake)
	}
}
