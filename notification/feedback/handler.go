package feedback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Store takes the reports of one verified request and commits them, or
// fails. A receiver calls it once per verified request that carries
// reports, with the request's context, and answers the provider 2xx only
// when it returned nil: that answer tells the provider to forget the
// report, so Store must have committed it (as outbox records keyed by
// [Report.EventID]) before it returns nil. On an error the receiver
// answers 503 and the provider sends the report again; the event ids make
// the second copy a duplicate.
//
// Store is called concurrently, from as many requests as the server
// serves at once. The slice is the Store's to keep. Its error is logged:
// it must not carry an address.
type Store interface {
	Store(ctx context.Context, reports []Report) error
}

// StoreFunc makes a plain function a [Store].
type StoreFunc func(ctx context.Context, reports []Report) error

// Store calls f(ctx, reports).
func (f StoreFunc) Store(ctx context.Context, reports []Report) error {
	return f(ctx, reports)
}

// MaxBodyBytesDefault is the default of [HandlerConfig.MaxBodyBytes]: 1
// MiB, above SendGrid's largest batch.
const MaxBodyBytesDefault = 1 << 20

// HandlerConfig is the part of every receiver's configuration that is
// about the HTTP request rather than the provider. Its zero value means
// every default.
type HandlerConfig struct {
	// MaxBodyBytes bounds a request's body: a longer one is answered 413
	// without being verified. Zero means MaxBodyBytesDefault; negative is
	// an error.
	MaxBodyBytes int64

	// Logger receives a Warn for every request answered 4xx and an Error
	// for every request answered 5xx, with the provider and the error,
	// which names what failed and never a secret, a signature or an
	// address. Nil means no logging.
	Logger *slog.Logger
}

// read is what a receiver does with a request's body once it is read
// within the limit: verify it, then parse it into reports. It returns
// an error wrapping one of the package's sentinels, or the reports, which
// may be none (an SNS subscription confirmation).
type read func(r *http.Request, body []byte) ([]Report, error)

// receiver is the http.Handler every provider's constructor returns: the
// shared skeleton around a provider's read.
type receiver struct {
	provider string
	maxBody  int64
	logger   *slog.Logger
	store    Store
	read     read
	// success writes the 2xx answer; nil means 204 without a body.
	success func(w http.ResponseWriter)
}

// newReceiver checks what every receiver needs and returns one for
// provider. Its errors name the provider's Config type, cfgName.
func newReceiver(provider, cfgName string, hc HandlerConfig, store Store, rd read) (*receiver, []error) {
	h := &receiver{provider: provider, maxBody: hc.MaxBodyBytes, logger: hc.Logger, store: store, read: rd}
	var errs []error
	switch {
	case hc.MaxBodyBytes < 0:
		errs = append(errs, fmt.Errorf("feedback: %s.MaxBodyBytes is negative: %d", cfgName, hc.MaxBodyBytes))
	case hc.MaxBodyBytes == 0:
		h.maxBody = MaxBodyBytesDefault
	}
	if store == nil {
		errs = append(errs, errors.New("feedback: the Store is nil"))
	}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	h.logger = h.logger.With("component", "feedback", "provider", provider)
	return h, errs
}

// ServeHTTP answers one request of the provider: 405 for anything but a
// POST, 413 for a body over the limit, 401 when it does not verify, 400
// when it verifies but does not parse, 503 when the Store fails, and 2xx
// once the Store committed the reports.
func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "feedback: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.fail(w, r, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, h.maxBody))
			return
		}
		h.fail(w, r, fmt.Errorf("%w: reading the body: %w", ErrPayload, err))
		return
	}
	reports, err := h.read(r, body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(reports) > 0 {
		if err := h.store.Store(r.Context(), reports); err != nil {
			h.fail(w, r, fmt.Errorf("%w: %w", ErrStore, err))
			return
		}
	}
	h.logger.DebugContext(r.Context(), "reports stored", "reports", len(reports))
	if h.success != nil {
		h.success(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail answers err with its status and its sentinel's text, and logs it.
func (h *receiver) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, text := answer(err)
	level := slog.LevelWarn
	if status >= 500 {
		level = slog.LevelError
	}
	h.logger.Log(r.Context(), level, "request refused", "status", status, "err", err)
	if errors.Is(err, ErrCredentials) {
		w.Header().Set("WWW-Authenticate", `Basic realm="feedback"`)
	}
	http.Error(w, text, status)
}

// durationOrDefault checks a Config's duration field.
func durationOrDefault(field string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("feedback: %s is negative: %s", field, d)
	case d == 0:
		return def, nil
	}
	return d, nil
}

// decodeJSON decodes body into v, or returns an ErrPayload error that
// says where it failed without quoting the body.
func decodeJSON(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("%w: not JSON at byte %d", ErrPayload, se.Offset)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return fmt.Errorf("%w: %s holds a JSON %s", ErrPayload, te.Field, te.Value)
	}
	if json.Valid(body) {
		// Such as a string where a number goes; the error would quote it.
		return fmt.Errorf("%w: a value does not fit its field", ErrPayload)
	}
	return fmt.Errorf("%w: not JSON", ErrPayload)
}
