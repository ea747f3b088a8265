package feedback

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"
)

// SESCertHostDefault is the default of [SESConfig.CertHost]: the SNS
// endpoint of any region, sns.<region>.amazonaws.com, and of the China
// regions, sns.<region>.amazonaws.com.cn.
const SESCertHostDefault = `sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?`

// SESToleranceDefault is the default of [SESConfig.Tolerance]: SNS signs
// the time it first published a message and keeps it on every retry, and
// its default delivery policy retries for well under an hour.
const SESToleranceDefault = time.Hour

// TimeoutDefault is the default of [SESConfig.Timeout] and
// [ExpoConfig.Timeout]: how long one outgoing call may take.
const TimeoutDefault = 10 * time.Second

// SESConfig configures the receiver of Amazon SES notifications delivered
// by an SNS topic's HTTPS subscription. TopicARNs is required; the zero
// value of every other field means its default.
type SESConfig struct {
	HandlerConfig

	// TopicARNs are the ARNs of the SNS topics SES publishes to. A message
	// from any other topic is refused before its certificate is fetched,
	// and only a subscription to one of them is confirmed. At least one
	// is required.
	TopicARNs []string

	// CertHost is a regular expression that the host (with its port, if
	// the URL has one) of a SigningCertURL and of a SubscribeURL must match
	// whole; only https URLs on such a host are fetched. Empty means
	// SESCertHostDefault. A test server's pattern is "127\.0\.0\.1:[0-9]+".
	CertHost string

	// HTTPClient fetches the signing certificates and confirms
	// subscriptions. Nil means a client of its own; a given client is used
	// for its transport (its root CAs, its proxy), never closed, and never
	// follows a redirect.
	HTTPClient *http.Client

	// Timeout bounds one certificate fetch or one confirmation. Zero means
	// TimeoutDefault; negative is an error.
	Timeout time.Duration

	// Tolerance is how far an SNS message's Timestamp may lie from the
	// receiver's clock. Zero means SESToleranceDefault; negative is an
	// error. A topic whose delivery policy retries for longer needs a
	// longer Tolerance.
	Tolerance time.Duration
}

// NewSES returns the receiver of Amazon SES notifications (Bounce,
// Complaint, Delivery, and the event-publishing DeliveryDelay) that an SNS
// topic posts to the path it is mounted on, with raw message delivery off.
//
// It decodes the SNS message, refuses any topic not in TopicARNs, checks
// that SigningCertURL is https on a CertHost host, fetches and caches the
// certificate, verifies the signature (version 1, SHA1withRSA, or 2,
// SHA256withRSA) over SNS's canonical string for the message type, and
// checks the Timestamp against Tolerance. A verified
// SubscriptionConfirmation is confirmed by a GET of its SubscribeURL when
// that passes the same host check; an UnsubscribeConfirmation is
// answered and nothing else. A Notification's Message becomes one report
// per recipient, keyed by the SNS MessageId.
func NewSES(cfg *SESConfig, store Store) (http.Handler, error) {
	if cfg == nil {
		return nil, errors.New("feedback: SESConfig is nil: TopicARNs is required")
	}
	var errs []error
	if len(cfg.TopicARNs) == 0 {
		errs = append(errs, errors.New("feedback: SESConfig.TopicARNs is empty"))
	}
	topics := slices.Clone(cfg.TopicARNs)
	hostPattern, err := regexp.Compile(`^(?:` + cmp.Or(cfg.CertHost, SESCertHostDefault) + `)$`)
	if err != nil {
		errs = append(errs, fmt.Errorf("feedback: SESConfig.CertHost is not a regular expression: %w", err))
	}
	timeout, err := durationOrDefault("SESConfig.Timeout", cfg.Timeout, TimeoutDefault)
	if err != nil {
		errs = append(errs, err)
	}
	tolerance, err := durationOrDefault("SESConfig.Tolerance", cfg.Tolerance, SESToleranceDefault)
	if err != nil {
		errs = append(errs, err)
	}
	v := newSNSVerifier(hostPattern, noRedirectClient(cfg.HTTPClient, timeout), timeout)
	h, herrs := newReceiver(ProviderSES, "SESConfig", cfg.HandlerConfig, store, func(r *http.Request, body []byte) ([]Report, error) {
		m, err := parseSNSMessage(body)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(topics, m.TopicArn) {
			return nil, fmt.Errorf("%w: TopicArn is not in SESConfig.TopicARNs", ErrTopic)
		}
		now := time.Now()
		if err := v.verify(r.Context(), m, now); err != nil {
			return nil, err
		}
		if err := checkTimestamp(parseTime(m.Timestamp), now, tolerance); err != nil {
			return nil, fmt.Errorf("%w: the SNS Timestamp", err)
		}
		switch m.Type {
		case snsSubscriptionConfirm:
			u, err := v.checkURL(m.SubscribeURL, "SubscribeURL")
			if err != nil {
				return nil, err
			}
			if _, err := v.get(r.Context(), u, certBodyMax, ErrConfirm, ErrConfirm); err != nil {
				return nil, err
			}
			return nil, nil
		case snsUnsubscribeConfirmed:
			return nil, nil
		}
		return parseSES(m.MessageID, []byte(m.Message))
	})
	if err := errors.Join(append(errs, herrs...)...); err != nil {
		return nil, err
	}
	h.success = func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	return h, nil
}

// noRedirectClient returns a client that sends with client's transport
// (or the default one) within timeout and never follows a redirect, which
// could lead away from the allowed host.
func noRedirectClient(client *http.Client, timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if client != nil {
		c.Transport = client.Transport
		c.Jar = client.Jar
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// sesMessage is the part of an SES notification this package reads: the
// notification contents of
// https://docs.aws.amazon.com/ses/latest/dg/notification-contents.html,
// and the event-publishing records, which name their kind eventType.
type sesMessage struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Mail             struct {
		MessageID   string `json:"messageId"`
		Timestamp   string `json:"timestamp"`
		Destination []string
	} `json:"mail"`
	Bounce *struct {
		BounceType        string `json:"bounceType"`
		BounceSubType     string `json:"bounceSubType"`
		BouncedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
			Status       string `json:"status"`
		} `json:"bouncedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"bounce"`
	Complaint *struct {
		ComplainedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		Timestamp             string `json:"timestamp"`
	} `json:"complaint"`
	Delivery *struct {
		Recipients []string `json:"recipients"`
		Timestamp  string   `json:"timestamp"`
	} `json:"delivery"`
	DeliveryDelay *struct {
		DelayType         string `json:"delayType"`
		DelayedRecipients []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"delayedRecipients"`
		Timestamp string `json:"timestamp"`
	} `json:"deliveryDelay"`
}

// parseSES turns the Message of a verified SNS notification into reports,
// one per recipient the notification names, each keyed by the SNS
// MessageId id (followed by "/" and the recipient's index when there are
// several). Every recipient of a bounce, complaint or delay is one the
// notification says failed: SES names them one by one.
func parseSES(id string, message []byte) ([]Report, error) {
	var m sesMessage
	if err := decodeJSON(message, &m); err != nil {
		return nil, err
	}
	kind := cmp.Or(m.NotificationType, m.EventType)
	if kind == "" {
		return nil, fmt.Errorf("%w: neither notificationType nor eventType", ErrPayload)
	}
	base := Report{
		Provider:   ProviderSES,
		Type:       kind,
		Channel:    ChannelMail,
		MessageID:  m.Mail.MessageID,
		OccurredAt: parseTime(m.Mail.Timestamp),
	}
	var addresses, statuses []string
	switch {
	case kind == "Bounce" && m.Bounce != nil:
		b := m.Bounce
		base.Class, base.Code = mailBounce(b.BounceType, b.BounceSubType)
		base.OccurredAt = cmp.Or(parseTime(b.Timestamp), base.OccurredAt)
		for _, r := range b.BouncedRecipients {
			addresses = append(addresses, r.EmailAddress)
			statuses = append(statuses, r.Status)
		}
		base.Detail = detail(b.BounceType, b.BounceSubType)
	case kind == "Complaint" && m.Complaint != nil:
		c := m.Complaint
		base.Class, base.Code = sesComplaint(c.ComplaintFeedbackType)
		base.OccurredAt = cmp.Or(parseTime(c.Timestamp), base.OccurredAt)
		for _, r := range c.ComplainedRecipients {
			addresses = append(addresses, r.EmailAddress)
		}
		base.Detail = detail(c.ComplaintFeedbackType)
	case kind == "Delivery" && m.Delivery != nil:
		base.Class, base.Code = ClassDelivered, CodeDelivered
		base.OccurredAt = cmp.Or(parseTime(m.Delivery.Timestamp), base.OccurredAt)
		addresses = m.Delivery.Recipients
	case kind == "DeliveryDelay" && m.DeliveryDelay != nil:
		d := m.DeliveryDelay
		base.Class, base.Code = sesDelay(d.DelayType), CodeDelayed
		base.OccurredAt = cmp.Or(parseTime(d.Timestamp), base.OccurredAt)
		for _, r := range d.DelayedRecipients {
			addresses = append(addresses, r.EmailAddress)
		}
		base.Detail = detail(d.DelayType)
	case kind == "Bounce" || kind == "Complaint" || kind == "Delivery" || kind == "DeliveryDelay":
		return nil, fmt.Errorf("%w: a %s without its %s object", ErrPayload, kind, kind)
	default:
		base.Class, base.Code = ClassNone, CodeIgnored
	}
	if len(addresses) == 0 {
		base.EventID = id
		return finish([]Report{base})
	}
	reports := make([]Report, len(addresses))
	for i, a := range addresses {
		r := base
		r.EventID = recipientEventID(id, i, len(addresses))
		r.Address = NormalizeAddress(ChannelMail, a)
		if i < len(statuses) && statusPattern.MatchString(statuses[i]) {
			r.Detail = base.Detail + " " + statuses[i]
		}
		reports[i] = r
	}
	return finish(reports)
}

// sesComplaint classifies a complaint by its complaintFeedbackType, the
// feedback types of RFC 5965 that SES passes on: "not-spam" is no
// complaint; "auth-failure" (a failed authentication of our mail) and
// "virus" (a virus in our mail) are on our side; "abuse", "fraud", "other"
// and none at all are complaints.
func sesComplaint(feedbackType string) (Class, string) {
	switch feedbackType {
	case "not-spam":
		return ClassNone, CodeNotSpam
	case "auth-failure":
		return ClassOurSide, CodeAuthFailure
	case "virus":
		return ClassOurSide, CodeBounceContent
	}
	return ClassComplaint, CodeComplaint
}

// sesDelay is the class of a delivery delay of type delayType. Our sending
// IP blocked or throttled (IPFailure), the recipient's server seeing too
// much unsolicited mail from our account (SpamDetected), SES's own trouble
// (InternalFailure), its own deferral (SendingDeferral) and its failed
// lookup of our own IP's host name (BYOIPHostNameLookupUnavailable) are on
// our side, and must not count toward suppressing the person; every
// other type (a full mailbox, the recipient's server) is transient.
func sesDelay(delayType string) Class {
	switch delayType {
	case "IPFailure", "SpamDetected", "InternalFailure", "SendingDeferral", "BYOIPHostNameLookupUnavailable":
		return ClassOurSide
	default:
		return ClassTransient
	}
}
