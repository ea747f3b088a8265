package notification

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/dbtx"
	"github.com/tidings-go/tidings/internal/ident"
	"github.com/tidings-go/tidings/internal/validate"
	"github.com/tidings-go/tidings/relay"
)

// Kind is the outbox record kind of a staged Request. The Dispatcher
// ignores records of any other kind.
const Kind = "notification.requested"

// RecipientMaxLen is the longest Request.Recipient accepted, in bytes.
const RecipientMaxLen = 1024

// ErrInvalidRequest marks a Request that cannot be staged; the error names
// the field. Its text never contains the recipient or the data.
var ErrInvalidRequest = errors.New("notification: invalid request")

// Request is what a caller stages: tell Recipient something over Channel.
type Request struct {
	// Channel routes the request to the delivery registered for it, such as
	// "mail", "push" or "sms": a lower-case identifier. Required.
	Channel string
	// Recipient is the address, phone number, device token or user id the
	// delivery understands. Required. Personal data: it is stored in the
	// outbox row and never logged.
	Recipient string
	// Template names the template or category the delivery renders; may be
	// empty.
	Template string
	// Data holds the template's values. It must encode as JSON; numbers come
	// back to the delivery as float64, as encoding/json decodes them.
	Data map[string]any
	// NotBefore, when set, is the time before which the request is not
	// delivered, such as a reminder 15 minutes before a booking ends. A
	// time in the past means now; one more than a year ahead
	// (relay.NotBeforeMax) is an error: keep such schedules in your own
	// tables.
	NotBefore time.Time

	// Subject is the person the request is about (a user id), apart from
	// the address it goes to: their preferences and quiet hours apply to
	// it (see Client.SetPreference and Client.SetQuietHours). Empty means
	// neither applies. At most SubjectMaxLen bytes, printable.
	Subject string
	// Category is what the request is about, such as "booking",
	// "marketing" or "security": a lower-case identifier that the
	// dispatcher's Config.Categories declares (its defaults per channel,
	// and whether it is critical). May be empty.
	Category string
	// Critical bypasses the subject's preferences and quiet hours, as for
	// a password-changed mail or a verification code. It does not bypass
	// the suppression of an address that bounced or complained.
	Critical bool
	// ExpiresAt, when set, is the time after which the request is of no
	// use: a request deferred by quiet hours, retried or waiting past it
	// ends expired instead of going out.
	ExpiresAt time.Time
	// QuietHoursAsOfStaging decides quiet hours as of the time the request
	// was staged instead of the time the relay reaches it: staged at
	// 21:55 for a window from 22:00, it goes out even at 22:05. It is the
	// staging time even with a NotBefore: a request staged at noon for
	// 03:00 with it goes out at 03:00, inside a 22:00-07:00 window.
	QuietHoursAsOfStaging bool
	// DedupKey, when set, lets one request of all those that carry it be
	// delivered, for the dispatcher's consumer: the first whose delivery
	// commits claims the key, and any other that comes due afterwards ends
	// as a duplicate carrying the first one's id and provider reference.
	// At most DedupKeyMaxLen bytes, printable. Keys are remembered for the
	// dispatcher's Config.DedupRetention.
	DedupKey string
	// Secrets are template values that nothing but the delivery may see,
	// such as a verification code: stored apart from the rest of the
	// request, never logged, listed or written to the timeline, and erased
	// in the transaction that records the request's end. A template uses
	// them as it uses Data (a key may not be in both). A dead request whose
	// secrets were erased cannot be re-emitted: it ends dead again, saying
	// so; stage a new one.
	Secrets map[string]string
}

// SubjectMaxLen and DedupKeyMaxLen bound Request.Subject and
// Request.DedupKey, in bytes.
const (
	SubjectMaxLen  = 200
	DedupKeyMaxLen = 200
)

// payload is a Request as the outbox row stores it. Secrets go apart
// (relay.Message.Secret); only their keys are here.
type payload struct {
	Channel    string         `json:"channel"`
	Recipient  string         `json:"recipient"`
	Template   string         `json:"template,omitempty"`
	Data       map[string]any `json:"data,omitempty"`
	Subject    string         `json:"subject,omitempty"`
	Category   string         `json:"category,omitempty"`
	Critical   bool           `json:"critical,omitempty"`
	ExpiresAt  *time.Time     `json:"expires_at,omitempty"`
	QuietAsOf  string         `json:"quiet_as_of,omitempty"` // "staging", or empty for the relay's hand
	DedupKey   string         `json:"dedup_key,omitempty"`
	SecretKeys []string       `json:"secret_keys,omitempty"`
}

// Message turns req into the relay message Stage writes for module: use it
// with a relay.Outbox of another schema than the default. An invalid
// request is an ErrInvalidRequest that names the field.
func (req Request) Message(module string) (relay.Message, error) {
	if err := req.validate(module); err != nil {
		return relay.Message{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	body, err := req.encode()
	if err != nil {
		return relay.Message{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	msg := relay.Message{Module: module, Kind: Kind, Lane: req.Channel, Payload: body, NotBefore: req.NotBefore}
	if len(req.Secrets) > 0 {
		if msg.Secret, err = json.Marshal(req.Secrets); err != nil {
			return relay.Message{}, fmt.Errorf("%w: Secrets cannot be encoded as JSON", ErrInvalidRequest)
		}
	}
	return msg, nil
}

// checkRecipient checks a recipient, staged (field Recipient) or answered
// by a Resolver: not empty, at most RecipientMaxLen bytes, and stored as
// it is.
func checkRecipient(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", field)
	case len(s) > RecipientMaxLen:
		return fmt.Errorf("%s is %d bytes long, at most %d allowed", field, len(s), RecipientMaxLen)
	}
	return validate.Text(field, s)
}

// validate checks every field but Data, which encode checks.
func (req Request) validate(module string) error {
	if err := ident.Check("module", module); err != nil {
		return err
	}
	if err := ident.Check("Channel", req.Channel); err != nil {
		return err
	}
	if err := checkRecipient("Recipient", req.Recipient); err != nil {
		return err
	}
	if err := validate.Text("Template", req.Template); err != nil {
		return err
	}
	if err := validate.NotBefore("NotBefore", req.NotBefore, time.Now()); err != nil {
		return err
	}
	if err := validate.Year("ExpiresAt", req.ExpiresAt); err != nil {
		return err
	}
	if req.Category != "" {
		if err := ident.Check("Category", req.Category); err != nil {
			return err
		}
	}
	if err := validate.Printable("Subject", req.Subject, SubjectMaxLen); err != nil {
		return err
	}
	if err := validate.Printable("DedupKey", req.DedupKey, DedupKeyMaxLen); err != nil {
		return err
	}
	if !req.ExpiresAt.IsZero() && !req.NotBefore.IsZero() && !req.ExpiresAt.After(req.NotBefore) {
		return errors.New("ExpiresAt is not after NotBefore: the request would never go out")
	}
	for _, key := range slices.Sorted(maps.Keys(req.Secrets)) {
		switch _, inData := req.Data[key]; {
		case key == "":
			return errors.New("Secrets has an empty key")
		case inData:
			return fmt.Errorf("Secrets[%q] is a key of Data too: a template value is one or the other", key)
		}
		if err := validate.Text(fmt.Sprintf("Secrets key %q", key), key); err != nil {
			return err
		}
		if err := validate.Text(fmt.Sprintf("Secrets[%q]", key), req.Secrets[key]); err != nil {
			return err
		}
	}
	return nil
}

// encode is the request's payload. Its errors name the field (and the key
// of Data) and quote no value.
func (req Request) encode() (body []byte, err error) {
	defer func() {
		// A MarshalJSON of the caller's that panics: its value may hold
		// anything, so it is not quoted.
		if recover() != nil {
			body, err = nil, errors.New("Data cannot be encoded as JSON: a MarshalJSON method panicked")
		}
	}()
	p := payload{Channel: req.Channel, Recipient: req.Recipient, Template: req.Template, Data: req.Data,
		Subject: req.Subject, Category: req.Category, Critical: req.Critical, DedupKey: req.DedupKey,
		SecretKeys: slices.Sorted(maps.Keys(req.Secrets))}
	if !req.ExpiresAt.IsZero() {
		p.ExpiresAt = &req.ExpiresAt
	}
	if req.QuietHoursAsOfStaging {
		p.QuietAsOf = "staging"
	}
	body, err = json.Marshal(p)
	if err != nil {
		// The encoder's message names a type, never a value.
		return nil, fmt.Errorf("Data cannot be encoded as JSON: %w", err)
	}
	if !validate.JSONStorable(body) {
		const cannot = "holds a NUL character, a lone UTF-16 surrogate or invalid UTF-8, which PostgreSQL cannot store"
		for _, key := range slices.Sorted(maps.Keys(req.Data)) {
			if v, _ := json.Marshal(req.Data[key]); !validate.JSONStorable(v) || strings.IndexByte(key, 0) >= 0 {
				return nil, fmt.Errorf("Data[%q] "+cannot, key)
			}
		}
		return nil, errors.New("Data " + cannot)
	}
	return body, nil
}

// Stage stages req for module's relay inside tx, in the default schema;
// see [Client.Stage].
func Stage(ctx context.Context, tx dbtx.Execer, module string, req Request) (uuid.UUID, error) {
	return defaultClient.Stage(ctx, tx, module, req)
}

// StageBatch stages reqs for module's relay in one statement inside tx, in
// the default schema; see [Client.StageBatch].
func StageBatch(ctx context.Context, tx dbtx.Execer, module string, reqs []Request) ([]uuid.UUID, error) {
	return defaultClient.StageBatch(ctx, tx, module, reqs)
}

// decode reads a staged request back. Its errors say what is wrong with
// the payload without quoting it.
func decode(body []byte) (payload, error) {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return p, fmt.Errorf("payload is not valid JSON (offset %d)", syntax.Offset)
		case errors.As(err, &typ):
			// Value describes the JSON value ("number 4e400"): keep the
			// kind, never the value itself.
			kind, _, _ := strings.Cut(typ.Value, " ")
			return p, fmt.Errorf("payload field %q is a JSON %s, want %s", typ.Field, kind, typ.Type)
		}
		return p, fmt.Errorf("payload does not decode: %w", err)
	}
	switch {
	case p.Channel == "":
		return p, errors.New("payload has no channel")
	case p.Recipient == "":
		return p, errors.New("payload has no recipient")
	}
	return p, nil
}
