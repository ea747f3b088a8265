package feedback

import (
	"crypto/hmac"
	"crypto/sha1" // Twilio's scheme is HMAC-SHA1.
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// TwilioSignatureHeader is the header Twilio signs its requests with.
const TwilioSignatureHeader = "X-Twilio-Signature"

// TwilioConfig configures the receiver of Twilio's SMS webhooks. URL and
// AuthTokens are required.
type TwilioConfig struct {
	HandlerConfig

	// URL is the full public URL Twilio posts to, exactly as it is
	// configured at Twilio (the StatusCallback of the messages, which the
	// sms module sends as its Config.StatusCallback, and the number's
	// messaging webhook), query included: Twilio signs it, and
	// behind a proxy the receiver cannot know it from the request.
	// Required: an absolute http or https URL.
	URL string

	// AuthTokens are the account's auth tokens: a request verifies when
	// its signature was made with any of them, so the primary and the
	// secondary token can both be configured while one is promoted. At
	// least one is required; errors never quote them.
	AuthTokens []string
}

// NewTwilio returns the receiver of Twilio's SMS status callbacks and
// incoming messages, to mount on the path of TwilioConfig.URL. It
// verifies X-Twilio-Signature, base64 HMAC-SHA1 with an auth token over
// the URL followed by every POST parameter, sorted by name, name then
// value, and turns the request into one report:
//
//   - a status callback (it has a MessageStatus) is keyed by MessageSid
//     and the status, and classed by the status and the ErrorCode;
//   - an incoming message is keyed by its MessageSid: Twilio's opt-out
//     keywords (STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT, REVOKE,
//     OPTOUT) are an unsubscribe of the sender's number, its opt-in
//     keywords (START, YES, UNSTOP) a resubscribe, anything else nothing
//     to do. Twilio's OptOutType parameter, sent with Advanced Opt-Out,
//     takes precedence over the keyword lists.
//
// It answers 200 with an empty TwiML response, which sends no reply.
func NewTwilio(cfg *TwilioConfig, store Store) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("feedback: TwilioConfig is nil: URL and AuthTokens are required")
	}
	var errs []error
	if u, err := url.Parse(cfg.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, errors.New("feedback: TwilioConfig.URL is not an absolute http or https URL"))
	}
	if len(cfg.AuthTokens) == 0 {
		errs = append(errs, errors.New("feedback: TwilioConfig.AuthTokens is empty"))
	}
	for i, token := range cfg.AuthTokens {
		if token == "" {
			errs = append(errs, fmt.Errorf("feedback: TwilioConfig.AuthTokens[%d] is empty", i))
		}
	}
	publicURL, tokens := cfg.URL, slices.Clone(cfg.AuthTokens)
	h, herrs := newReceiver(ProviderTwilio, "TwilioConfig", cfg.HandlerConfig, store, func(r *http.Request, body []byte) ([]Report, error) {
		params, err := verifyTwilio(tokens, publicURL, r.Header, body)
		if err != nil {
			return nil, err
		}
		return parseTwilio(params)
	})
	if err := errors.Join(append(errs, herrs...)...); err != nil {
		return nil, err
	}
	h.success = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Response></Response>`))
	}
	return h, nil
}

// verifyTwilio checks a Twilio request whose body is form-encoded, as
// "Secure webhooks" describes it
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security), and
// returns its parameters.
func verifyTwilio(tokens []string, publicURL string, header http.Header, body []byte) (url.Values, error) {
	signature := header.Get(TwilioSignatureHeader)
	if err := requireHeaders(TwilioSignatureHeader, signature); err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not base64", ErrSignature, TwilioSignatureHeader)
	}
	params, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: the body is not form-encoded", ErrSignature)
	}
	data := twilioSigned(publicURL, params)
	for _, token := range tokens {
		mac := hmac.New(sha1.New, []byte(token))
		mac.Write([]byte(data))
		if hmac.Equal(mac.Sum(nil), sig) {
			return params, nil
		}
	}
	return nil, fmt.Errorf("%w: %s matches no auth token", ErrSignature, TwilioSignatureHeader)
}

// twilioSigned is the string Twilio signs: the URL, then each parameter
// sorted by name (and the values of a repeated one sorted), name then
// value.
func twilioSigned(publicURL string, params url.Values) string {
	var b strings.Builder
	b.WriteString(publicURL)
	for _, name := range slices.Sorted(maps.Keys(params)) {
		for _, v := range slices.Sorted(slices.Values(params[name])) {
			b.WriteString(name)
			b.WriteString(v)
		}
	}
	return b.String()
}

// The keywords Twilio's default opt-out handling acts on
// (https://help.twilio.com/articles/223134027, and REVOKE and OPTOUT since
// May 2025: https://www.twilio.com/en-us/blog/update-to-fcc-s-sms-opt-out-keywords).
// Only a message of the keyword alone counts.
var (
	twilioOptOut = []string{"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"}
	twilioOptIn  = []string{"START", "YES", "UNSTOP"}
)

// parseTwilio turns the parameters of a verified Twilio request into its
// one report.
func parseTwilio(params url.Values) ([]Report, error) {
	sid := params.Get("MessageSid")
	if sid == "" {
		return nil, fmt.Errorf("%w: no MessageSid", ErrPayload)
	}
	r := Report{Provider: ProviderTwilio, Channel: ChannelSMS}
	if status := params.Get("MessageStatus"); status != "" {
		r.EventID = sid + ":" + status
		r.Type = status
		r.Address = NormalizeAddress(ChannelSMS, params.Get("To"))
		r.MessageID = sid
		r.Class, r.Code = twilioStatus(status, params.Get("ErrorCode"))
		r.Detail = detail(status)
		return finish([]Report{r})
	}
	if !params.Has("Body") && params.Get("SmsStatus") != "received" {
		return nil, fmt.Errorf("%w: neither a status callback nor an incoming message", ErrPayload)
	}
	r.EventID = sid
	r.Type = "received"
	r.Address = NormalizeAddress(ChannelSMS, params.Get("From"))
	keyword := strings.ToUpper(strings.TrimSpace(params.Get("Body")))
	switch optOut := strings.ToUpper(params.Get("OptOutType")); {
	case optOut == "STOP" || optOut == "" && slices.Contains(twilioOptOut, keyword):
		r.Class, r.Code = ClassUnsubscribe, CodeUnsubscribe
	case optOut == "START" || optOut == "" && slices.Contains(twilioOptIn, keyword):
		r.Class, r.Code = ClassResubscribe, CodeResubscribe
	default:
		r.Class, r.Code = ClassNone, CodeIgnored
	}
	return finish([]Report{r})
}

// twilioStatus classifies a status callback by its MessageStatus and
// ErrorCode, after Twilio's error pages
// (https://www.twilio.com/docs/api/errors/30003 and its neighbours):
//
//   - 30003, unreachable destination handset (off, no signal): transient;
//   - 30005, unknown destination handset, and 30006, a landline or an
//     unreachable carrier: permanent, the number cannot take an SMS;
//   - 30004, message blocked, and 30008, unknown error: transient;
//   - 21610, the recipient replied STOP: an unsubscribe;
//   - 30007, filtered as spam by the carrier, and every other code:
//     our side when the message failed (Twilio could not send it), and
//     transient when it was undelivered, since the carrier had it;
//   - delivered is delivered, read is engagement, every other status
//     (queued, sent, ...) nothing to do.
func twilioStatus(status, errorCode string) (Class, string) {
	code := strings.TrimSpace(errorCode)
	if code == "0" || strings.TrimLeft(code, "0123456789") != "" || len(code) > 8 {
		code = ""
	}
	if code != "" {
		reason := "twilio." + code
		switch code {
		case "30003", "30004", "30008":
			return ClassTransient, reason
		case "30005", "30006":
			return ClassPermanent, reason
		case "21610":
			return ClassUnsubscribe, reason
		case "30007":
			return ClassOurSide, reason
		}
		if status == "undelivered" {
			return ClassTransient, reason
		}
		return ClassOurSide, reason
	}
	switch status {
	case "delivered":
		return ClassDelivered, CodeDelivered
	case "read":
		return ClassDelivered, CodeEngaged
	case "undelivered":
		return ClassTransient, CodeBounceTransient
	case "failed":
		return ClassOurSide, CodeSendFailed
	}
	return ClassNone, CodeIgnored
}
