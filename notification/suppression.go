package notification

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/validate"
	"github.com/tidings-go/tidings/notification/feedback"
)

// Suppression is an address that no request goes to on its channel:
// a request to it ends suppressed (Outcome suppressed, code
// policy.suppressed) without a provider call, critical or not. The
// dispatcher writes one when it applies a provider's report (see
// FeedbackStore); the application writes one with Client.Suppress.
//
// Addresses are compared normalised, on both sides, by
// feedback.NormalizeAddress: a mail address is lower-cased whole, a phone
// number (E.164) and a push token are kept as given, spaces trimmed. A
// suppression of a push token is its invalidation: Expo said the device
// no longer has the app.
type Suppression struct {
	// Channel is the channel suppressed, such as "mail": a lower-case
	// identifier. Required.
	Channel string
	// Address is the suppressed address, normalised. Required; at most
	// RecipientMaxLen bytes. Personal data: never log it.
	Address string
	// Scope is "" for every category, or the one category (Request.Category)
	// suppressed, such as "marketing" for an unsubscribe from it.
	Scope string
	// Class says what made the address suppressed, and who may lift it:
	// feedback.ClassUnsubscribe (the person asked; their resubscribe, such
	// as an SMS START, lifts it), feedback.ClassPermanent (a hard bounce,
	// an unknown number, an unregistered push token),
	// feedback.ClassComplaint, or feedback.ClassTransient (too many
	// transient failures within the dispatcher's TransientWindow). Only an
	// operator's Lift lifts the others. Empty means ClassUnsubscribe for
	// Suppress.
	Class feedback.Class
	// Reason is a stable machine code, such as "bounce.permanent",
	// "complaint", "unsubscribe", "twilio.21610",
	// "expo.device_not_registered" or ReasonTransientLimit. Empty means
	// "unsubscribe" for Suppress; at most 200 bytes, printable.
	Reason string
	// Provider is the provider that reported it, such as "resend"; "" for
	// one written by the application, or by the dispatcher when a
	// delivery rejected a request with delivery.CodeRecipientGone or
	// delivery.CodeRecipientUnsubscribed (its Reason then).
	Provider string
	// Source is the provider's event id of the report that suppressed it,
	// the id of the request whose delivery answered the address gone or
	// unsubscribed, or
	// the application's note (at most 256 bytes, printable, never
	// personal data).
	Source string
	// CreatedAt is when it was written (read only).
	CreatedAt time.Time
}

// ReasonTransientLimit is the Reason of an address suppressed because the
// dispatcher's TransientLimit transient failures were reported for it
// within its TransientWindow.
const ReasonTransientLimit = "transient.limit"

// The bounds of a Suppression's Reason and Source, in bytes.
const (
	ReasonMaxLen = 200
	SourceMaxLen = 256
)

// checkAddress checks a channel and an address given to a suppression
// call and returns the address normalised.
func checkAddress(channel, address string) (string, error) {
	if err := ident.Check("Channel", channel); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	address = feedback.NormalizeAddress(channel, address)
	switch {
	case address == "":
		return "", fmt.Errorf("%w: Address is empty", ErrInvalidRequest)
	case len(address) > RecipientMaxLen:
		return "", fmt.Errorf("%w: Address is %d bytes long, at most %d allowed", ErrInvalidRequest, len(address), RecipientMaxLen)
	}
	if err := validate.Printable("Address", address, RecipientMaxLen); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return address, nil
}

// checkSuppressionScope checks a suppression's scope: "" or a category.
func checkSuppressionScope(scope string) error {
	if scope == "" {
		return nil
	}
	if err := ident.Check("Scope", scope); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return nil
}

// Suppress writes s inside tx, the caller's own transaction: an
// unsubscribe link commits it with the rest of what the click changes,
// and a request staged or delivered after that commit ends suppressed. An
// address already suppressed in s's scope keeps its first suppression.
// Requests already pending to the address end suppressed when they come
// due. Address is normalised; Class, Reason and Provider have their
// defaults; CreatedAt is ignored. An invalid s is an ErrInvalidRequest
// that names the field, and writes nothing.
func (c *Client) Suppress(ctx context.Context, tx dbtx.Execer, s Suppression) error {
	address, err := checkAddress(s.Channel, s.Address)
	if err != nil {
		return err
	}
	s.Address = address
	s.Class = cmp.Or(s.Class, feedback.ClassUnsubscribe)
	s.Reason = cmp.Or(s.Reason, feedback.CodeUnsubscribe)
	var errs []error
	switch s.Class {
	case feedback.ClassUnsubscribe, feedback.ClassPermanent, feedback.ClassComplaint, feedback.ClassTransient:
	default:
		errs = append(errs, fmt.Errorf("%w: Class %q is not one that suppresses: unsubscribe, permanent, complaint or transient",
			ErrInvalidRequest, s.Class))
	}
	for _, err := range []error{
		validate.Printable("Reason", s.Reason, ReasonMaxLen),
		validate.Printable("Provider", s.Provider, ReasonMaxLen),
		validate.Printable("Source", s.Source, SourceMaxLen),
	} {
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalidRequest, err))
		}
	}
	if err := errors.Join(append(errs, checkSuppressionScope(s.Scope), checkTx(tx))...); err != nil {
		return err
	}
	return c.policy.insertSuppression(ctx, tx, s)
}

// insertSuppression writes s, normalised and checked, inside tx.
func (q policyQueries) insertSuppression(ctx context.Context, tx dbtx.Execer, s Suppression) error {
	if _, err := tx.ExecContext(ctx, q.suppress, s.Channel, s.Address, s.Scope, string(s.Class), s.Reason, s.Provider, s.Source); err != nil {
		return fmt.Errorf("notification: suppress: %w", err)
	}
	return nil
}

// Lift removes the suppression of address on channel in scope ("" for the
// one of every category) inside tx, and reports whether there was one:
// requests to the address go out again from that commit on (those ended
// suppressed stay so). A nil tx lifts at once, on the client's pool: an
// operator's lift (tidings lift, the console), which has no transaction
// of its own to join; a nil *sql.Tx is an error. An operator lifts any
// suppression; a person's resubscribe reported by a provider lifts only
// those of class unsubscribe.
func (c *Client) Lift(ctx context.Context, tx dbtx.Execer, channel, address, scope string) (bool, error) {
	address, err := checkAddress(channel, address)
	if err := errors.Join(err, checkSuppressionScope(scope)); err != nil {
		return false, err
	}
	if tx == nil {
		tx = c.db
	} else if err := checkTx(tx); err != nil { // a nil *sql.Tx, say: no transaction begun
		return false, err
	}
	res, err := tx.ExecContext(ctx, c.policy.lift, channel, address, scope)
	if err != nil {
		return false, fmt.Errorf("notification: lift: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("notification: lift: %w", err)
	}
	return n > 0, nil
}

// SuppressionFilter selects suppressions. A zero field selects everything
// on it.
type SuppressionFilter struct {
	Channel string // only this channel's
	Address string // only this address's (normalised for Channel, which it needs)
	// After starts the page after this suppression: the last one of the
	// previous page. Nil starts at the first.
	After *Suppression
	// Limit is the most returned: default SuppressionsLimitDefault, at most
	// SuppressionsLimitMax.
	Limit int
}

// The bounds of SuppressionFilter.Limit.
const (
	SuppressionsLimitDefault = 100
	SuppressionsLimitMax     = 1000
)

// Suppressions returns a page of the suppressions f selects, by channel,
// address and scope (in the order of their bytes, whatever the database's
// collation); pass the last of a page as f.After for the next.
// The push tokens a provider reported unregistered are the suppressions of
// channel "push": an application removes them from its own device tables.
func (c *Client) Suppressions(ctx context.Context, f *SuppressionFilter) ([]Suppression, error) {
	var sf SuppressionFilter
	if f != nil {
		sf = *f
	}
	var after Suppression
	if sf.After != nil {
		after = *sf.After
	}
	switch {
	case sf.Limit > SuppressionsLimitMax:
		return nil, fmt.Errorf("%w: Limit %d is above SuppressionsLimitMax (%d)", ErrInvalidRequest, sf.Limit, SuppressionsLimitMax)
	case sf.Limit <= 0:
		sf.Limit = SuppressionsLimitDefault
	}
	if sf.Address != "" {
		address, err := checkAddress(sf.Channel, sf.Address)
		if err != nil {
			return nil, err
		}
		sf.Address = address
	}
	rows, err := c.db.QueryContext(ctx, c.policy.suppressions, sf.Channel, sf.Address, after.Channel, after.Address, after.Scope, sf.Limit)
	if err != nil {
		return nil, fmt.Errorf("notification: suppressions: %w", err)
	}
	defer rows.Close()
	var out []Suppression
	for rows.Next() {
		var s Suppression
		if err := rows.Scan(&s.Channel, &s.Address, &s.Scope, &s.Class, &s.Reason, &s.Provider, &s.Source, &s.CreatedAt); err != nil {
			return nil, fmt.Errorf("notification: suppressions: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("notification: suppressions: %w", err)
	}
	return out, nil
}
