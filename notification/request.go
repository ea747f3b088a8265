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
}

// payload is a Request as the outbox row stores it.
type payload struct {
	Channel   string         `json:"channel"`
	Recipient string         `json:"recipient"`
	Template  string         `json:"template,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
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
	return relay.Message{Module: module, Kind: Kind, Lane: req.Channel, Payload: body, NotBefore: req.NotBefore}, nil
}

// validate checks every field but Data, which encode checks.
func (req Request) validate(module string) error {
	if err := ident.Check("module", module); err != nil {
		return err
	}
	if err := ident.Check("Channel", req.Channel); err != nil {
		return err
	}
	switch {
	case req.Recipient == "":
		return errors.New("Recipient is empty")
	case len(req.Recipient) > RecipientMaxLen:
		return fmt.Errorf("Recipient is %d bytes long, at most %d allowed", len(req.Recipient), RecipientMaxLen)
	}
	if err := validate.NoNUL("Recipient", req.Recipient); err != nil {
		return err
	}
	if err := validate.NoNUL("Template", req.Template); err != nil {
		return err
	}
	return validate.NotBefore("NotBefore", req.NotBefore, time.Now())
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
	body, err = json.Marshal(payload{Channel: req.Channel, Recipient: req.Recipient, Template: req.Template, Data: req.Data})
	if err != nil {
		// The encoder's message names a type, never a value.
		return nil, fmt.Errorf("Data cannot be encoded as JSON: %w", err)
	}
	if validate.JSONHasNUL(body) {
		for _, key := range slices.Sorted(maps.Keys(req.Data)) {
			if v, _ := json.Marshal(req.Data[key]); validate.JSONHasNUL(v) || strings.IndexByte(key, 0) >= 0 {
				return nil, fmt.Errorf("Data[%q] holds a NUL character, which PostgreSQL cannot store", key)
			}
		}
		return nil, errors.New("Data holds a NUL character, which PostgreSQL cannot store")
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
