package feedback

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ResendToleranceDefault is the default of [ResendConfig.Tolerance]: the
// five minutes Svix's own libraries allow.
const ResendToleranceDefault = 5 * time.Minute

// ResendConfig configures the receiver of Resend's webhooks. Secrets is
// required; the zero value of every other field means its default.
type ResendConfig struct {
	HandlerConfig

	// Secrets are the webhook's signing secrets, as Resend shows them
	// ("whsec_" and base64). A request verifies when its svix-signature
	// header holds a signature made with any of them, so a rotation is:
	// add the new secret, roll the webhook's secret at Resend, then remove
	// the old one. At least one is required; errors never quote them.
	Secrets []string

	// Tolerance is how far the svix-timestamp header may lie from the
	// receiver's clock, in the past or the future. Zero means
	// ResendToleranceDefault; negative is an error.
	Tolerance time.Duration
}

// NewResend returns the receiver of Resend's webhooks, to mount on the
// path the webhook posts to. It verifies the Svix signature on the raw
// body (svix-id, svix-timestamp, svix-signature), turns the event into
// reports keyed by svix-id and gives them to store.
//
// It reads email.bounced, email.complained, email.delivered,
// email.delivery_delayed, email.opened, email.clicked and email.failed;
// any other event type is reported with [ClassNone].
func NewResend(cfg *ResendConfig, store Store) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("feedback: ResendConfig is nil: Secrets is required")
	}
	var keys [][]byte
	var errs []error
	if len(cfg.Secrets) == 0 {
		errs = append(errs, errors.New("feedback: ResendConfig.Secrets is empty"))
	}
	for i, s := range cfg.Secrets {
		key, problem := parseSvixSecret(s)
		if problem != "" {
			errs = append(errs, fmt.Errorf("feedback: ResendConfig.Secrets[%d] %s", i, problem))
			continue
		}
		keys = append(keys, key)
	}
	tolerance, err := durationOrDefault("ResendConfig.Tolerance", cfg.Tolerance, ResendToleranceDefault)
	if err != nil {
		errs = append(errs, err)
	}
	h, herrs := newReceiver(ProviderResend, "ResendConfig", cfg.HandlerConfig, store, func(r *http.Request, body []byte) ([]Report, error) {
		id, err := verifySvix(keys, r.Header, body, time.Now(), tolerance)
		if err != nil {
			return nil, err
		}
		return parseResend(id, body)
	})
	if err := errors.Join(append(errs, herrs...)...); err != nil {
		return nil, err
	}
	return h, nil
}

// resendEvent is the part of a Resend webhook this package reads
// (https://resend.com/docs/webhooks/introduction).
type resendEvent struct {
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		EmailID string     `json:"email_id"`
		To      stringList `json:"to"`
		Bounce  *struct {
			Type    string `json:"type"`
			SubType string `json:"subType"`
		} `json:"bounce"`
	} `json:"data"`
}

// stringList is a JSON array of strings that also takes a single string.
type stringList []string

// UnmarshalJSON takes a string or an array of strings.
func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

// parseResend turns the body of a verified Resend webhook into reports:
// one per recipient of the email, or a single one without an address when
// the event is a failure of an email with several recipients, since
// Resend does not say which of them failed.
func parseResend(id string, body []byte) ([]Report, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: no event id", ErrPayload)
	}
	var ev resendEvent
	if err := decodeJSON(body, &ev); err != nil {
		return nil, err
	}
	if ev.Type == "" {
		return nil, fmt.Errorf("%w: no event type", ErrPayload)
	}
	base := Report{
		Provider:   ProviderResend,
		Type:       ev.Type,
		Channel:    ChannelMail,
		MessageID:  ev.Data.EmailID,
		OccurredAt: parseTime(ev.CreatedAt),
	}
	switch ev.Type {
	case "email.bounced":
		if b := ev.Data.Bounce; b != nil {
			base.Class, base.Code = mailBounce(b.Type, b.SubType)
			base.Detail = detail(b.Type, b.SubType)
		} else {
			// Resend sends email.bounced when the receiving server
			// permanently rejected the email.
			base.Class, base.Code = ClassPermanent, CodeBouncePermanent
		}
	case "email.complained":
		base.Class, base.Code = ClassComplaint, CodeComplaint
	case "email.delivered":
		base.Class, base.Code = ClassDelivered, CodeDelivered
	case "email.delivery_delayed":
		base.Class, base.Code = ClassTransient, CodeDelayed
	case "email.opened", "email.clicked":
		base.Class, base.Code = ClassDelivered, CodeEngaged
	case "email.failed":
		base.Class, base.Code = ClassOurSide, CodeSendFailed
	default:
		base.Class, base.Code = ClassNone, CodeIgnored
	}
	return finish(perRecipient(base, id, ChannelMail, ev.Data.To))
}

// perRecipient returns base once per address, each with its normalised
// address and its own event id derived from id. When base is a failure
// (permanent, transient, complaint, unsubscribe) and there are several
// addresses, it returns base once, without an address: the provider did
// not say which recipient failed, and suppressing all of them would
// suppress people whose address works. With no address, it returns base
// once, without one.
func perRecipient(base Report, id, channel string, addresses []string) []Report {
	ambiguous := len(addresses) > 1 && base.Class != ClassDelivered && base.Class != ClassNone && base.Class != ClassOurSide
	if len(addresses) == 0 || ambiguous {
		base.EventID = id
		return []Report{base}
	}
	reports := make([]Report, len(addresses))
	for i, a := range addresses {
		r := base
		r.EventID = recipientEventID(id, i, len(addresses))
		r.Address = NormalizeAddress(channel, a)
		reports[i] = r
	}
	return reports
}

// mailBounce classifies a bounce by the type and sub-type Amazon SES
// gives it, which Resend passes on (SES's "bounce types" in
// https://docs.aws.amazon.com/ses/latest/dg/notification-contents.html):
// Permanent is permanent; Transient is transient unless the sub-type says
// the receiver refused what was sent (MessageTooLarge, ContentRejected,
// AttachmentRejected), which is on our side; anything else, Undetermined
// included, is transient, never permanent.
func mailBounce(bounceType, subType string) (Class, string) {
	switch bounceType {
	case "Permanent":
		return ClassPermanent, CodeBouncePermanent
	case "Transient":
		switch subType {
		case "MessageTooLarge", "ContentRejected", "AttachmentRejected":
			return ClassOurSide, CodeBounceContent
		}
		return ClassTransient, CodeBounceTransient
	}
	return ClassTransient, CodeBounceUndetermined
}
