package delivery

import "strconv"

// Repeat says what a delivery's provider does with a message handed to it
// again under the same idempotency key ([Pending.ID]): after a crash
// between the provider's accept and the dispatcher's commit, or after a
// commit that lost its answer. No database can make a provider's send
// atomic with a commit, so a repeat can always happen; what it costs
// depends on the provider.
type Repeat int

const (
	// RepeatSends: the provider sends a repeat as a second message (plain
	// SMTP, Expo push, Twilio's Messages API). The zero value, and what a
	// Delivery that declares nothing is taken to be: the dispatcher gives
	// each of its requests a transaction and a commit of its own, the
	// smallest window for a repeat.
	RepeatSends Repeat = iota
	// RepeatDropped: the provider drops a repeat of an idempotency key it
	// has seen (Resend within 24 hours, a webhook receiver that
	// deduplicates on webhook-id). A larger window costs nothing, so the
	// dispatcher lets such requests share commits.
	RepeatDropped
	// RepeatImpossible: the delivery writes into the claim's own
	// transaction ([TxFrom]) and calls no provider, so its effect commits
	// with the claim or not at all: exactly once. The dispatcher gives
	// such a delivery the transaction whether or not its request shares
	// the commit.
	RepeatImpossible
)

// String returns "sends", "dropped" or "impossible".
func (r Repeat) String() string {
	switch r {
	case RepeatSends:
		return "sends"
	case RepeatDropped:
		return "dropped"
	case RepeatImpossible:
		return "impossible"
	}
	return "Repeat(" + strconv.Itoa(int(r)) + ")"
}

// Repeater is a [Delivery] that says what a repeat does at its provider
// (see [Repeat]). A Delivery that is not a Repeater is [RepeatSends].
type Repeater interface {
	Repeats() Repeat
}

// RepeatsOf returns what d declares, or RepeatSends when it declares
// nothing.
func RepeatsOf(d Delivery) Repeat {
	if r, ok := d.(Repeater); ok {
		return r.Repeats()
	}
	return RepeatSends
}
