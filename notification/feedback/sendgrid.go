package feedback

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// The headers of SendGrid's Signed Event Webhook.
const (
	SendGridSignatureHeader = "X-Twilio-Email-Event-Webhook-Signature"
	SendGridTimestampHeader = "X-Twilio-Email-Event-Webhook-Timestamp"
)

// SendGridToleranceDefault is the default of [SendGridConfig.Tolerance].
// SendGrid documents no tolerance; ten minutes allow for clock skew and a
// slow delivery.
const SendGridToleranceDefault = 10 * time.Minute

// SendGridConfig configures the receiver of SendGrid's Event Webhook.
// PublicKeys is required; the zero value of every other field means its
// default.
type SendGridConfig struct {
	HandlerConfig

	// PublicKeys are the webhook's verification keys, as SendGrid shows
	// them under Mail Settings: base64 of a DER PKIX ECDSA P-256 public
	// key. A request verifies when any of them verifies its signature, so
	// the key can be replaced without a gap. At least one is required.
	PublicKeys []string

	// Tolerance is how far the timestamp header may lie from the
	// receiver's clock, in the past or the future. Zero means
	// SendGridToleranceDefault; negative is an error.
	Tolerance time.Duration
}

// NewSendGrid returns the receiver of SendGrid's Event Webhook, to mount
// on the path the webhook posts to. It verifies the ECDSA P-256 SHA-256
// signature of SendGridSignatureHeader over the timestamp header followed
// by the raw body, checks the timestamp, and turns each event of the batch
// into a report keyed by its sg_event_id.
func NewSendGrid(cfg *SendGridConfig, store Store) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("feedback: SendGridConfig is nil: PublicKeys is required")
	}
	var errs []error
	if len(cfg.PublicKeys) == 0 {
		errs = append(errs, errors.New("feedback: SendGridConfig.PublicKeys is empty"))
	}
	keys := make([]*ecdsa.PublicKey, 0, len(cfg.PublicKeys))
	for i, s := range cfg.PublicKeys {
		key, err := parseSendGridKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("feedback: SendGridConfig.PublicKeys[%d] %w", i, err))
			continue
		}
		keys = append(keys, key)
	}
	tolerance, err := durationOrDefault("SendGridConfig.Tolerance", cfg.Tolerance, SendGridToleranceDefault)
	if err != nil {
		errs = append(errs, err)
	}
	h, herrs := newReceiver(ProviderSendGrid, "SendGridConfig", cfg.HandlerConfig, store, func(r *http.Request, body []byte) ([]Report, error) {
		if err := verifySendGrid(keys, r.Header, body, time.Now(), tolerance); err != nil {
			return nil, err
		}
		return parseSendGrid(body)
	})
	if err := errors.Join(append(errs, herrs...)...); err != nil {
		return nil, err
	}
	return h, nil
}

// parseSendGridKey reads a verification key as SendGrid shows it.
func parseSendGridKey(s string) (*ecdsa.PublicKey, error) {
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("is not base64")
	}
	key, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("is not a DER PKIX public key")
	}
	ec, ok := key.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("is not an ECDSA P-256 key")
	}
	return ec, nil
}

// verifySendGrid checks a signed Event Webhook request at time now
// (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features):
// the signature header is base64 of an ASN.1 DER ECDSA signature of
// SHA-256(timestamp + body).
func verifySendGrid(keys []*ecdsa.PublicKey, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	signature := header.Get(SendGridSignatureHeader)
	timestamp := header.Get(SendGridTimestampHeader)
	if err := requireHeaders(SendGridSignatureHeader, signature, SendGridTimestampHeader, timestamp); err != nil {
		return err
	}
	t, err := parseUnix(timestamp)
	if err != nil {
		return fmt.Errorf("%w: %s", err, SendGridTimestampHeader)
	}
	if err := checkTimestamp(t, now, tolerance); err != nil {
		return fmt.Errorf("%w: %s", err, SendGridTimestampHeader)
	}
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return fmt.Errorf("%w: %s is not base64", ErrSignature, SendGridSignatureHeader)
	}
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write(body)
	sum := h.Sum(nil)
	for _, key := range keys {
		if ecdsa.VerifyASN1(key, sum, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s matches no public key", ErrSignature, SendGridSignatureHeader)
}

// sendgridEvent is the part of an Event Webhook event this package reads
// (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event).
type sendgridEvent struct {
	Email                string      `json:"email"`
	Timestamp            json.Number `json:"timestamp"`
	Event                string      `json:"event"`
	EventID              string      `json:"sg_event_id"`
	MessageID            string      `json:"sg_message_id"`
	Type                 string      `json:"type"`
	Reason               string      `json:"reason"`
	Status               string      `json:"status"`
	BounceClassification string      `json:"bounce_classification"`
	ASMGroupID           json.Number `json:"asm_group_id"`
}

// parseSendGrid turns a verified batch of events into one report each.
// An event without an sg_event_id gets one derived from its bytes. An
// event this package cannot read (no event name, a field of another type
// than SendGrid documents) is a report of ClassNone: refusing the batch
// would lose its other events once SendGrid stops sending it again.
func parseSendGrid(body []byte) ([]Report, error) {
	var raws []json.RawMessage
	if err := decodeJSON(body, &raws); err != nil {
		return nil, err
	}
	reports := make([]Report, 0, len(raws))
	for _, raw := range raws {
		var ev sendgridEvent
		if err := json.Unmarshal(raw, &ev); err != nil || ev.Event == "" {
			reports = append(reports, Report{Provider: ProviderSendGrid, EventID: derivedEventID("unreadable", string(raw)),
				Type: "unreadable", Channel: ChannelMail, Class: ClassNone, Code: CodeIgnored})
			continue
		}
		r := Report{
			Provider:   ProviderSendGrid,
			EventID:    ev.EventID,
			Type:       ev.Event,
			Channel:    ChannelMail,
			Address:    NormalizeAddress(ChannelMail, ev.Email),
			MessageID:  sendgridMessageID(ev.MessageID),
			OccurredAt: unixNumber(ev.Timestamp),
		}
		if r.EventID == "" {
			r.EventID = derivedEventID(ev.Event, string(raw))
		}
		r.Class, r.Code, r.Detail = sendgridClass(&ev)
		reports = append(reports, r)
	}
	return finish(reports)
}

// sendgridMessageID is the message id a send got (its X-Message-Id) out of
// an sg_message_id, which SendGrid extends with ".filter..." or
// ".recvd-..." once it processed the message.
func sendgridMessageID(id string) string {
	for _, suffix := range []string{".filter", ".recvd"} {
		if i := strings.Index(id, suffix); i > 0 {
			return id[:i]
		}
	}
	return id
}

// unixNumber is a JSON number of unix seconds as a time, or the zero time.
func unixNumber(n json.Number) time.Time {
	f, err := n.Float64()
	if err != nil || f <= 0 || f > math.MaxInt32*4 {
		return time.Time{}
	}
	return time.Unix(int64(f), 0).UTC()
}

// sendgridDroppedReasons are the reasons SendGrid gives a dropped event
// that say something of the address, with their classes; any other
// reason is the sender's.
var sendgridDroppedReasons = map[string]struct {
	class Class
	code  string
}{
	"Bounced Address":        {ClassPermanent, CodeBouncePermanent},
	"Invalid":                {ClassPermanent, CodeBouncePermanent},
	"Unsubscribed Address":   {ClassUnsubscribe, CodeUnsubscribe},
	"Spam Reporting Address": {ClassComplaint, CodeComplaint},
}

// sendgridClass classifies an event after SendGrid's Event Webhook
// reference: a bounce of type "blocked", or one SendGrid classifies as
// Content, Reputation or Frequency or Volume, is the sender's; any other
// bounce is permanent. A dropped message is classed by its reason: an
// address SendGrid already suppressed for a bounce, an unsubscribe or a
// spam report, or an invalid one, is that; any other reason is the
// sender's. deferred is a delay.
func sendgridClass(ev *sendgridEvent) (Class, string, string) {
	switch ev.Event {
	case "bounce":
		d := detail(ev.Type, ev.BounceClassification, ev.Status)
		if ev.Type == "blocked" {
			return ClassOurSide, CodeBounceBlocked, d
		}
		switch ev.BounceClassification {
		case "Content":
			return ClassOurSide, CodeBounceContent, d
		case "Reputation", "Frequency or Volume":
			return ClassOurSide, CodeBounceBlocked, d
		}
		return ClassPermanent, CodeBouncePermanent, d
	case "dropped":
		if c, ok := sendgridDroppedReasons[ev.Reason]; ok {
			return c.class, c.code, ev.Reason
		}
		return ClassOurSide, CodeDropped, ""
	case "deferred":
		return ClassTransient, CodeDelayed, ""
	case "delivered":
		return ClassDelivered, CodeDelivered, ""
	case "open", "click":
		return ClassDelivered, CodeEngaged, ""
	case "spamreport":
		return ClassComplaint, CodeComplaint, ""
	case "unsubscribe":
		return ClassUnsubscribe, CodeUnsubscribe, ""
	case "group_unsubscribe":
		return ClassUnsubscribe, CodeGroupUnsubscribe, sendgridGroup(ev.ASMGroupID)
	case "group_resubscribe":
		return ClassResubscribe, CodeGroupResubscribe, sendgridGroup(ev.ASMGroupID)
	}
	return ClassNone, CodeIgnored, ""
}

// sendgridGroup names the unsubscribe group of an event in a Detail.
func sendgridGroup(id json.Number) string {
	if _, err := id.Int64(); err != nil {
		return ""
	}
	return "asm_group_id " + string(id)
}
