package notification

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/notification/feedback"
	"github.com/tidings-go/tidings/relay"
)

// effect is what applying one report changed.
type effect struct {
	requests   []uuid.UUID // the requests it is about, found by the provider's reference
	suppressed bool        // the address is suppressed, now or since earlier
	lifted     int64       // suppressions a resubscribe lifted
	ended      []uuid.UUID // pending requests to the address, ended suppressed
	failures   int         // transient failures of the address within the window, this one included
}

// detail is what the report record's timeline says of e: never the
// address.
func (e effect) detail(r feedback.Report) map[string]any {
	d := map[string]any{"provider": r.Provider, "channel": r.Channel, "class": string(r.Class), "code": r.Code}
	if len(e.requests) > 0 {
		ids := make([]string, len(e.requests))
		for i, id := range e.requests {
			ids[i] = id.String()
		}
		d["requests"] = ids
	}
	if e.suppressed {
		d["suppressed"] = true
	}
	if len(e.ended) > 0 {
		d["ended"] = len(e.ended)
	}
	if e.lifted > 0 {
		d["lifted"] = e.lifted
	}
	if e.failures > 0 {
		d["transient_failures"] = e.failures
	}
	return d
}

// applyReports applies the report records idx of b, each in a
// transaction of its own.
func (d *Dispatcher) applyReports(ctx context.Context, bind *binding, b *relay.Batch, idx []int) {
	for _, i := range idx {
		d.applyReport(ctx, bind, b, i)
	}
}

// applyReport applies the report of record i once, in one transaction:
// its inbox claim, its effects on the address (a suppression and the
// pending requests it ends, a transient failure counted, a suppression
// lifted), an entry on the timeline of each request it is about, and its
// own outcome. A report claimed at an earlier hand is done without
// effects.
func (d *Dispatcher) applyReport(ctx context.Context, bind *binding, b *relay.Batch, i int) {
	rec := b.Record(i)
	var r feedback.Report
	if err := json.Unmarshal(rec.Payload, &r); err != nil || !r.Class.Valid() || ident.Check("Channel", r.Channel) != nil {
		b.Answer(i, relay.Dead(errors.New("undecodable report: not a feedback.Report with a class and a channel")).
			WithCode(CodeUndecodable))
		return
	}
	var eff effect
	var before bool
	err := d.inTx(ctx, bind, func(ctx context.Context, tx *sql.Tx) error {
		first, err := bind.inbox.Once(ctx, tx, d.cfg.Consumer, rec.ID)
		if err != nil || !first {
			before = !first
			return err
		}
		if eff, err = d.effects(ctx, bind, tx, rec, r); err != nil {
			return err
		}
		return b.SettleIn(ctx, tx, []int{i}, []relay.Result{relay.Done().WithCode(CodeReportApplied).WithDetail(eff.detail(r))})
	})
	switch {
	case err != nil:
		b.Answer(i, d.unsureOf(rec, fmt.Errorf("apply a report: %w", err)))
		return
	case before:
		b.Answer(i, relay.Done().WithCode(CodeReportApplied).WithDetail(map[string]any{"applied": "at an earlier hand"}))
		return
	}
	b.Committed([]int{i})
	d.tel.reported(r.Provider, r.Class)
	for range eff.ended {
		d.tel.decided(r.Channel, RuleSuppression)
	}
	if r.Class == feedback.ClassOurSide {
		d.log.WarnContext(ctx, "a provider reported a problem on our side, not the recipient's",
			"provider", r.Provider, "code", r.Code, "outbox_id", rec.ID)
	}
}

// effects makes the changes report r of record rec calls for, inside tx.
func (d *Dispatcher) effects(ctx context.Context, bind *binding, tx *sql.Tx, rec relay.Record, r feedback.Report) (effect, error) {
	var eff effect
	originals, err := bind.outbox.FindByResult(ctx, tx, Kind, r.Channel, r.MessageID)
	if err != nil {
		return eff, err
	}
	for _, o := range originals {
		eff.requests = append(eff.requests, o.ID)
	}
	address := r.Address
	if _, resolved := d.cfg.Resolvers[r.Channel]; address == "" && len(originals) == 1 && !resolved {
		// A receipt that names only the message: the request it is
		// about says where it went, unless it named a person whose
		// address its channel's Resolver gave at delivery (and may give
		// differently now).
		if p, err := decode(originals[0].Payload); err == nil {
			address = feedback.NormalizeAddress(r.Channel, p.Recipient)
		}
	}
	// A group's unsubscribe is the provider's to enforce: its groups are
	// not this dispatcher's categories.
	group := r.Code == feedback.CodeGroupUnsubscribe || r.Code == feedback.CodeGroupResubscribe
	if address != "" && !group {
		s := Suppression{Channel: r.Channel, Address: address, Class: r.Class, Reason: r.Code, Provider: r.Provider, Source: r.EventID}
		switch r.Class {
		case feedback.ClassPermanent, feedback.ClassComplaint, feedback.ClassUnsubscribe:
			err = d.suppressFrom(ctx, bind, tx, rec, s, &eff)
		case feedback.ClassTransient:
			err = tx.QueryRowContext(ctx, bind.policy.countTransient, r.Channel, address, d.cfg.TransientWindow.Seconds(), r.MessageID).
				Scan(&eff.failures)
			if err == nil && eff.failures >= d.cfg.TransientLimit {
				s.Reason = ReasonTransientLimit
				if _, err = tx.ExecContext(ctx, bind.policy.clearTransient, r.Channel, address); err == nil {
					err = d.suppressFrom(ctx, bind, tx, rec, s, &eff)
				}
			}
		case feedback.ClassResubscribe:
			var res sql.Result
			if res, err = tx.ExecContext(ctx, bind.policy.liftUnsubscribed, r.Channel, address); err == nil {
				eff.lifted, err = res.RowsAffected()
			}
		}
		if err != nil {
			return eff, err
		}
	}
	detail := map[string]any{"provider": r.Provider, "class": string(r.Class), "type": r.Type, "event_id": r.EventID,
		"report": rec.ID.String()}
	if r.Detail != "" {
		detail["detail"] = r.Detail
	}
	if eff.suppressed {
		detail["suppressed"] = true
	}
	return eff, bind.outbox.Note(ctx, tx, eff.requests, "feedback", r.Code, detail)
}

// suppressFrom suppresses s's address for the report of record rec, and
// ends the module's pending requests to it as suppressed. A request that
// a delivery holds (its inbox claim is not committed) is waited for: if
// the delivery commits, the request was delivered before the report
// arrived and stays so; if not, it ends suppressed. A request claimed by
// this transaction that is no longer pending gets its claim back.
func (d *Dispatcher) suppressFrom(ctx context.Context, bind *binding, tx *sql.Tx, rec relay.Record, s Suppression, eff *effect) error {
	if err := bind.policy.insertSuppression(ctx, tx, s); err != nil {
		return err
	}
	eff.suppressed = true
	rows, err := tx.QueryContext(ctx, bind.policy.pendingTo, rec.Module, s.Channel, Kind, strings.ToLower(s.Address))
	if err != nil {
		return fmt.Errorf("pending requests to the address: %w", err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		var recipient string
		if err := rows.Scan(&id, &recipient); err != nil {
			_ = rows.Close()
			return fmt.Errorf("pending requests to the address: %w", err)
		}
		if feedback.NormalizeAddress(s.Channel, recipient) == s.Address {
			ids = append(ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pending requests to the address: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	first, err := bind.inbox.OnceBatch(ctx, tx, d.cfg.Consumer, ids)
	if err != nil {
		return err
	}
	var claimed []uuid.UUID
	for _, id := range ids {
		if first[id] {
			claimed = append(claimed, id)
		}
	}
	detail := s.detail()
	delete(detail, "since")
	detail["report"] = rec.ID.String()
	if eff.ended, err = bind.outbox.Finish(ctx, tx, claimed, CodeSuppressed, detail); err != nil {
		return err
	}
	var release []uuid.UUID
	for _, id := range claimed {
		if !slices.Contains(eff.ended, id) {
			release = append(release, id)
		}
	}
	if len(release) > 0 {
		return bind.inbox.Release(ctx, tx, d.cfg.Consumer, release)
	}
	return nil
}

// inTx runs fn in a transaction of bind's pool, at read committed as
// claims are, and commits it. The transaction outlives ctx's end by as
// long as a delivery's claim may: fn may wait on one.
func (d *Dispatcher) inTx(ctx context.Context, bind *binding, fn func(ctx context.Context, tx *sql.Tx) error) error {
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bind.timeout+commitSlack)
	defer cancel()
	tx, err := bind.db.BeginTx(txCtx, readCommitted)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(txCtx, tx); err != nil {
		return err
	}
	return tx.Commit()
}
