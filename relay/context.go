package relay

import "context"

type ctxKey int

const (
	correlationKey ctxKey = iota
	causationKey
)

// WithCorrelationID returns ctx carrying a correlation id: every record
// staged with it, and everything those records cause, shares the id. A
// record staged without one starts a chain: its correlation id is its own
// id. Staging refuses an id longer than CorrelationMaxLen bytes, or one
// that is not printable UTF-8 (as one taken from a request's header may
// be), with ErrInvalidMessage, before it writes anything.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey, id)
}

// CorrelationMaxLen is the longest correlation or causation id staging
// takes, in bytes.
const CorrelationMaxLen = 200

// CorrelationID returns the correlation id ctx carries, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey).(string)
	return id
}

// WithCausationID returns ctx carrying the id of the record that causes
// whatever is staged with it. The relay sets it, with the correlation id, on
// the context of every hand, so a sink that stages records needs to do
// nothing.
func WithCausationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, causationKey, id)
}

// CausationID returns the causation id ctx carries, or "".
func CausationID(ctx context.Context) string {
	id, _ := ctx.Value(causationKey).(string)
	return id
}
