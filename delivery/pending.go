package delivery

import (
	"maps"
	"time"

	"github.com/google/uuid"
)

// Pending is one staged notification request, as a delivery sees it.
//
// The dispatcher builds a Pending for every hand of a request; a delivery
// treats it, including Data, as read-only. The zero value is not a request
// the dispatcher hands: a real one always has an ID, a Channel, a Recipient
// and an Attempt of at least 1.
type Pending struct {
	// ID identifies the request for its whole life, across retries,
	// redeliveries and re-emits. It is the idempotency key to give the
	// provider (Idempotency-Key header, Message-ID, ...), and the causation
	// id of anything the delivery stages in turn.
	ID uuid.UUID

	// Channel is the key the dispatcher routed the request on, such as
	// "mail", "push" or "sms".
	Channel string

	// Recipient is whom to tell: an address, a phone number, a device token
	// or a user id. It is personal data: never log it and never put it into
	// an outcome's reason.
	Recipient string

	// Template is the template or category name. It may be empty, in which
	// case the module decides what to send.
	Template string

	// Data holds the values for the template. It may be nil, which means no
	// values. A delivery must not modify it.
	Data map[string]any

	// Secrets are template values that only the rendered message may
	// carry, such as a verification code: a module that renders a
	// template gives it Data and Secrets together (see TemplateData); one
	// that stores or forwards the request as it is (in-app, webhook) leaves
	// them out. Never log them, never put them into a reason. They are
	// erased from the database once the request ends.
	Secrets map[string]string

	// Category is what the request is about, such as "booking" or
	// "security", as staged. It may be empty.
	Category string

	// CorrelationID is the correlation id of the write that staged the
	// request. It may be empty.
	CorrelationID string

	// CausationID is the id of the record that caused the request, or empty
	// when the request was not caused by another record.
	CausationID string

	// Attempt counts delivery attempts: 1 on the first attempt, 2 on the
	// first retry, and so on. It counts within one life of the request: a
	// dead request that an operator re-emits starts again at 1, with the
	// retry policy's full budget, while its ID (the idempotency key) stays
	// the same. The request's timeline keeps the attempts of every life.
	Attempt int

	// StagedAt is when the request was staged, by the database clock.
	StagedAt time.Time
}

// TemplateData returns the values a template of p renders with: Data and
// Secrets in one map (a key is in one of them only). It is Data itself
// when there are no secrets.
func (p Pending) TemplateData() map[string]any {
	if len(p.Secrets) == 0 {
		return p.Data
	}
	m := make(map[string]any, len(p.Data)+len(p.Secrets))
	maps.Copy(m, p.Data)
	for k, v := range p.Secrets {
		m[k] = v
	}
	return m
}
