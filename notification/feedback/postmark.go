package feedback

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Credential is one user name and password pair that Postmark may send as
// HTTP basic auth, from the credentials in the webhook URL configured at
// Postmark ("https://user:password@host/path").
type Credential struct {
	// Username is the user name; required.
	Username string
	// Password is the password; required. Errors never quote it.
	Password string
}

// PostmarkConfig configures the receiver of Postmark's webhooks.
// Credentials is required; the zero value of HandlerConfig means its
// defaults.
type PostmarkConfig struct {
	HandlerConfig

	// Credentials are the basic-auth pairs a request may carry. A request
	// is accepted when it carries one of them, so a rotation is: add the
	// new pair, change the webhook URL at Postmark, then remove the old
	// pair. At least one is required.
	Credentials []Credential
}

// NewPostmark returns the receiver of Postmark's webhooks (Bounce, Spam
// Complaint, Subscription Change, and Delivery, Open and Click), to mount
// on the path of the webhook URL.
//
// Postmark signs nothing. The only check is the basic-auth credentials
// the webhook URL carries, compared in constant time: anyone who learns
// the URL can post reports, and a report cannot be told from a replay of
// an older one. Keep the URL secret, serve it over HTTPS only, and rotate
// the credentials when it may have leaked.
func NewPostmark(cfg *PostmarkConfig, store Store) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("feedback: PostmarkConfig is nil: Credentials is required")
	}
	var errs []error
	if len(cfg.Credentials) == 0 {
		errs = append(errs, errors.New("feedback: PostmarkConfig.Credentials is empty"))
	}
	type digest struct{ user, password [sha256.Size]byte }
	creds := make([]digest, 0, len(cfg.Credentials))
	for i, c := range cfg.Credentials {
		if c.Username == "" || c.Password == "" {
			errs = append(errs, fmt.Errorf("feedback: PostmarkConfig.Credentials[%d] has an empty Username or Password", i))
			continue
		}
		creds = append(creds, digest{sha256.Sum256([]byte(c.Username)), sha256.Sum256([]byte(c.Password))})
	}
	h, herrs := newReceiver(ProviderPostmark, "PostmarkConfig", cfg.HandlerConfig, store, func(r *http.Request, body []byte) ([]Report, error) {
		user, password, ok := r.BasicAuth()
		if !ok {
			return nil, fmt.Errorf("%w: no basic auth", ErrCredentials)
		}
		// Hashing first makes every comparison as long as every other,
		// whatever the lengths; every pair is compared.
		u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
		match := 0
		for _, c := range creds {
			match |= subtle.ConstantTimeCompare(u[:], c.user[:]) & subtle.ConstantTimeCompare(p[:], c.password[:])
		}
		if match != 1 {
			return nil, fmt.Errorf("%w: basic auth", ErrCredentials)
		}
		return parsePostmark(body)
	})
	if err := errors.Join(append(errs, herrs...)...); err != nil {
		return nil, err
	}
	// Postmark retries a post it does not get "200 OK" for.
	h.success = func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	return h, nil
}

// postmarkEvent is the part of a Postmark webhook this package reads, from
// the examples of https://postmarkapp.com/developer/webhooks/bounce-webhook,
// .../spam-complaint-webhook and .../subscription-change-webhook.
type postmarkEvent struct {
	RecordType        string
	ID                json.Number
	Type              string
	MessageID         string
	Email             string
	Recipient         string
	BouncedAt         string
	ChangedAt         string
	DeliveredAt       string
	ReceivedAt        string
	Inactive          bool
	CanActivate       bool
	SuppressSending   bool
	SuppressionReason string
}

// parsePostmark turns the body of an authenticated Postmark webhook into
// its one report.
func parsePostmark(body []byte) ([]Report, error) {
	var ev postmarkEvent
	if err := decodeJSON(body, &ev); err != nil {
		return nil, err
	}
	if ev.RecordType == "" {
		return nil, fmt.Errorf("%w: no RecordType", ErrPayload)
	}
	r := Report{
		Provider:  ProviderPostmark,
		Type:      ev.RecordType,
		Channel:   ChannelMail,
		MessageID: ev.MessageID,
		Address:   NormalizeAddress(ChannelMail, ev.Email),
	}
	switch ev.RecordType {
	case "Bounce", "SpamComplaint":
		r.EventID = postmarkRecordID(ev.RecordType, ev.ID, body)
		r.OccurredAt = parseTime(ev.BouncedAt)
		r.Class, r.Code = postmarkBounce(ev.Type, ev.Inactive)
		r.Detail = detail(ev.Type, postmarkFlag("inactive", ev.Inactive), postmarkFlag("can_activate", ev.CanActivate))
	case "SubscriptionChange":
		r.Address = NormalizeAddress(ChannelMail, ev.Recipient)
		r.EventID = derivedEventID(ev.RecordType, ev.MessageID, r.Address, ev.ChangedAt,
			strconv.FormatBool(ev.SuppressSending), ev.SuppressionReason)
		r.OccurredAt = parseTime(ev.ChangedAt)
		r.Class, r.Code = postmarkSubscription(ev.SuppressSending, ev.SuppressionReason)
		r.Detail = detail(ev.SuppressionReason)
		if !ev.SuppressSending {
			r.Detail = detail("reactivated", ev.SuppressionReason)
		}
	case "Delivery":
		r.Address = NormalizeAddress(ChannelMail, ev.Recipient)
		r.EventID = derivedEventID(ev.RecordType, ev.MessageID, r.Address, ev.DeliveredAt)
		r.OccurredAt = parseTime(ev.DeliveredAt)
		r.Class, r.Code = ClassDelivered, CodeDelivered
	case "Open", "Click":
		r.Address = NormalizeAddress(ChannelMail, ev.Recipient)
		r.EventID = derivedEventID(ev.RecordType, ev.MessageID, r.Address, ev.ReceivedAt)
		r.OccurredAt = parseTime(ev.ReceivedAt)
		r.Class, r.Code = ClassDelivered, CodeEngaged
	default:
		r.EventID = derivedEventID(ev.RecordType, string(body))
		r.Class, r.Code = ClassNone, CodeIgnored
	}
	return finish([]Report{r})
}

// postmarkRecordID is the event id of a bounce or spam complaint: its
// record type and Postmark's numeric ID, or a hash of the body when it has
// none.
func postmarkRecordID(recordType string, id json.Number, body []byte) string {
	if _, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		return recordType + ":" + string(id)
	}
	return derivedEventID(recordType, string(body))
}

// postmarkFlag is name when set, for a Detail.
func postmarkFlag(name string, set bool) string {
	if set {
		return name
	}
	return ""
}

// postmarkBounce classifies a bounce by Postmark's bounce type, from the
// table of https://postmarkapp.com/developer/api/bounce-api#bounce-types:
//
//   - HardBounce ("unknown user, mailbox not found") and BadEmailAddress
//     are permanent;
//   - SoftBounce ("mailbox full, account disabled, exceeds quota"),
//     Transient ("message delayed") and DnsError ("a temporary DNS
//     error") are transient, unless Postmark made the address Inactive:
//     then it sends there no more, which is permanent;
//   - SpamComplaint is a complaint, Unsubscribe an unsubscribe;
//   - SpamNotification ("classified as spam ... or had rejected content")
//     and VirusNotification are the content, Blocked ("ISP block") and
//     DMARCPolicy the sender: our side, never the person's;
//   - SMTPApiError and TemplateRenderingFailed failed before sending: our
//     side;
//   - Subscribe is a reply that Postmark parsed, not the person's consent:
//     nothing to do, like AutoResponder, AddressChange,
//     ChallengeVerification, OpenRelayTest, ManuallyDeactivated,
//     Unconfirmed, InboundError and Unknown.
func postmarkBounce(bounceType string, inactive bool) (Class, string) {
	switch bounceType {
	case "HardBounce", "BadEmailAddress":
		return ClassPermanent, CodeBouncePermanent
	case "SoftBounce", "Transient", "DnsError":
		if inactive {
			return ClassPermanent, CodeBouncePermanent
		}
		return ClassTransient, CodeBounceTransient
	case "SpamComplaint":
		return ClassComplaint, CodeComplaint
	case "Unsubscribe":
		return ClassUnsubscribe, CodeUnsubscribe
	case "SpamNotification", "VirusNotification":
		return ClassOurSide, CodeBounceContent
	case "Blocked":
		return ClassOurSide, CodeBounceBlocked
	case "DMARCPolicy":
		return ClassOurSide, CodeAuthFailure
	case "SMTPApiError", "TemplateRenderingFailed":
		return ClassOurSide, CodeSendFailed
	}
	return ClassNone, CodeIgnored
}

// postmarkSubscription classifies a subscription change
// (https://postmarkapp.com/developer/webhooks/subscription-change-webhook):
// SuppressSending true is a suppression for its SuppressionReason:
// HardBounce, SpamComplaint or ManualSuppression (an unsubscribe link, or
// the sender's own). False is a reactivation, which only the sender makes
// (in Postmark's UI or through its API), never the person: it lifts
// nothing here, so that it cannot undo the person's own unsubscribe.
func postmarkSubscription(suppress bool, reason string) (Class, string) {
	if !suppress {
		return ClassNone, CodeIgnored
	}
	switch reason {
	case "HardBounce":
		return ClassPermanent, CodeBouncePermanent
	case "SpamComplaint":
		return ClassComplaint, CodeComplaint
	}
	return ClassUnsubscribe, CodeUnsubscribe
}
