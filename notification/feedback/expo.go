package feedback

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ExpoBaseURLDefault is the default of [ExpoConfig.BaseURL]: Expo's push
// service.
const ExpoBaseURLDefault = "https://exp.host"

// ExpoIDsMax is how many ticket ids Expo takes in one getReceipts request;
// [Expo.Receipts] sends more in several.
const ExpoIDsMax = 1000

// expoReceiptsPath is where Expo answers receipts, below the base URL.
const expoReceiptsPath = "/--/api/v2/push/getReceipts"

// expoAnswerMax bounds the answer read: a thousand receipts fit well
// within it.
const expoAnswerMax = 4 << 20

// ExpoConfig configures an [Expo] client. The zero value of every field
// means its default; a nil *ExpoConfig means all defaults.
type ExpoConfig struct {
	// BaseURL is where Expo's push service is, such as
	// "https://exp.host" (the default, ExpoBaseURLDefault) or a test
	// server's URL: an absolute http or https URL without a query.
	BaseURL string

	// AccessToken is an Expo access token, sent as "Authorization: Bearer
	// <token>" for a project that requires one. Empty sends none. Errors
	// never quote it.
	AccessToken string

	// HTTPClient sends the requests. Nil means a client of its own with
	// Timeout. A given client is used as it is and never closed.
	HTTPClient *http.Client

	// Timeout bounds one request, on top of the context's deadline. Zero
	// means TimeoutDefault; negative is an error.
	Timeout time.Duration
}

// Expo fetches push receipts from Expo's push service and turns them into
// reports. Expo has no webhook: a service polls for the receipts of the
// tickets its sends got, some minutes after sending, and within the day
// Expo keeps them.
//
// An Expo is immutable and safe for concurrent use; it holds nothing to
// close.
type Expo struct {
	endpoint string
	token    string
	client   *http.Client
	timeout  time.Duration
}

// NewExpo returns an Expo client for cfg, which it validates. It calls
// nothing.
func NewExpo(cfg *ExpoConfig) (*Expo, error) {
	if cfg == nil {
		cfg = &ExpoConfig{}
	}
	var errs []error
	base, err := url.Parse(cmp.Or(cfg.BaseURL, ExpoBaseURLDefault))
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.RawQuery != "" {
		errs = append(errs, errors.New("feedback: ExpoConfig.BaseURL is not an absolute http or https URL without a query"))
	}
	if strings.ContainsFunc(cfg.AccessToken, func(r rune) bool { return r <= ' ' || r > '~' }) {
		errs = append(errs, errors.New("feedback: ExpoConfig.AccessToken contains a space, a control or a non-ASCII character"))
	}
	timeout, err := durationOrDefault("ExpoConfig.Timeout", cfg.Timeout, TimeoutDefault)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: timeout}
	}
	return &Expo{
		endpoint: strings.TrimSuffix(base.String(), "/") + expoReceiptsPath,
		token:    cfg.AccessToken,
		client:   client,
		timeout:  timeout,
	}, nil
}

// ExpoError is the error of a getReceipts request that Expo did not
// answer with receipts: a status other than 200, an answer that is not
// receipts, or a request that failed on the way. Its text names the
// status and Expo's error code, never Expo's message or the access token.
type ExpoError struct {
	// StatusCode is the HTTP status Expo answered, or 0 when the request
	// failed before an answer.
	StatusCode int
	// Code is the code of Expo's first error, such as "TOO_MANY_REQUESTS",
	// or "" when the answer had none.
	Code string
	// RetryAfter is the wait Expo's Retry-After header asked for, or 0.
	RetryAfter time.Duration
	// Err is why the request failed before an answer, or nil.
	Err error
}

// Error says what failed.
func (e *ExpoError) Error() string {
	var msg string
	switch {
	case e.StatusCode == 0:
		msg = "feedback: expo: getReceipts failed"
	case e.StatusCode == http.StatusOK:
		msg = "feedback: expo: getReceipts answered no receipts"
	default:
		msg = "feedback: expo: getReceipts answered " + strconv.Itoa(e.StatusCode)
	}
	if e.Code != "" {
		msg += ": " + e.Code
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Err.
func (e *ExpoError) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed later: after a
// 429, a 5xx, or a request that failed on the way (a timeout, a refused
// connection), but not after the caller's context ended.
func (e *ExpoError) Retryable() bool {
	switch {
	case e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500:
		return true
	case e.StatusCode == 0:
		return !errors.Is(e.Err, context.Canceled)
	}
	return false
}

// expoAnswer is what getReceipts answers
// (https://docs.expo.dev/push-notifications/sending-notifications/#push-receipts).
type expoAnswer struct {
	Data   map[string]expoReceipt `json:"data"`
	Errors []struct {
		Code string `json:"code"`
	} `json:"errors"`
}

// expoReceipt is one receipt.
type expoReceipt struct {
	Status  string `json:"status"`
	Details struct {
		Error         string `json:"error"`
		ExpoPushToken string `json:"expoPushToken"`
	} `json:"details"`
}

// Receipts asks Expo for the receipts of the tickets ids, in requests of
// at most ExpoIDsMax ids, and returns one report per receipt Expo has, in
// the order of ids. A ticket whose receipt is not ready, or no longer
// kept, has no report: ask again later, or give up after a day.
//
// Each report is keyed by the ticket id, which is also its MessageID. Its
// Address is the push token when Expo's receipt names it, and empty
// otherwise. An "ok" receipt is delivered; DeviceNotRegistered is
// permanent, the only receipt that invalidates a token; MessageTooBig,
// MessageRateExceeded, InvalidCredentials, MismatchSenderId and any other
// error are on our side.
//
// On an error, Receipts returns the reports of the requests that
// succeeded before it and an error: an *ExpoError, which [Retryable]
// tells apart, or the context's error. An empty id is an error before any
// request.
func (e *Expo) Receipts(ctx context.Context, ids []string) ([]Report, error) {
	for i, id := range ids {
		if strings.TrimSpace(id) == "" || !validID(id) {
			return nil, fmt.Errorf("feedback: expo: ticket id %d is empty, longer than %d bytes or not printable UTF-8", i, EventIDMax)
		}
	}
	var reports []Report
	for start := 0; start < len(ids); start += ExpoIDsMax {
		chunk := ids[start:min(start+ExpoIDsMax, len(ids))]
		receipts, err := e.fetch(ctx, chunk)
		if err != nil {
			return reports, err
		}
		for _, id := range chunk {
			if rc, ok := receipts[id]; ok {
				reports = append(reports, expoReport(id, rc))
			}
		}
	}
	return reports, nil
}

// fetch sends one getReceipts request.
func (e *Expo) fetch(ctx context.Context, ids []string) (map[string]expoReceipt, error) {
	body, err := json.Marshal(struct {
		IDs []string `json:"ids"`
	}{ids})
	if err != nil {
		return nil, fmt.Errorf("feedback: expo: encoding the ids: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &ExpoError{Err: errors.New("building the request")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// The error quotes the URL, which carries no secret: the
		// token travels in a header.
		return nil, &ExpoError{Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, expoAnswerMax))
	if err != nil {
		return nil, &ExpoError{StatusCode: resp.StatusCode, Err: errors.New("reading the answer")}
	}
	answer, decodeErr := decodeExpoAnswer(raw)
	if resp.StatusCode != http.StatusOK || decodeErr != nil {
		xe := &ExpoError{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
		if len(answer.Errors) > 0 && expoCodePattern.MatchString(answer.Errors[0].Code) {
			xe.Code = answer.Errors[0].Code
		}
		return nil, xe
	}
	return answer.Data, nil
}

// decodeExpoAnswer decodes a getReceipts answer; an error when it is not
// JSON or holds no data.
func decodeExpoAnswer(raw []byte) (expoAnswer, error) {
	var answer expoAnswer
	if err := json.Unmarshal(raw, &answer); err != nil {
		return answer, err
	}
	if answer.Data == nil {
		return answer, errors.New("no data")
	}
	return answer, nil
}

// expoCodePattern is what an Expo error code may look like to be quoted.
var expoCodePattern = regexp.MustCompile(`^[A-Za-z_]{1,64}$`)

// retryAfter reads a Retry-After header of seconds, capped at a day; 0
// when there is none.
func retryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs <= 0 {
		return 0
	}
	return min(time.Duration(secs)*time.Second, 24*time.Hour)
}

// expoReport turns the receipt of ticket id into a report.
func expoReport(id string, rc expoReceipt) Report {
	r := Report{
		Provider:  ProviderExpo,
		EventID:   id,
		Type:      storable(cmp.Or(rc.Status, "unknown")),
		Channel:   ChannelPush,
		Address:   storable(NormalizeAddress(ChannelPush, rc.Details.ExpoPushToken)),
		MessageID: id,
	}
	switch {
	case rc.Status == "ok":
		r.Class, r.Code = ClassDelivered, CodeDelivered
	case rc.Details.Error == "DeviceNotRegistered":
		r.Class, r.Code = ClassPermanent, "expo.device_not_registered"
	case expoCodePattern.MatchString(rc.Details.Error):
		r.Class, r.Code = ClassOurSide, "expo."+snakeCase(rc.Details.Error)
		r.Detail = detail(rc.Details.Error)
	default:
		r.Class, r.Code = ClassOurSide, "expo.error"
	}
	return r
}

// snakeCase turns an Expo error such as MessageTooBig into message_too_big.
func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 && s[i-1] != '_' {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
