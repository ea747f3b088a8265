package feedback

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The providers whose reports this package reads, as [Report.Provider]
// names them.
const (
	ProviderResend   = "resend"
	ProviderPostmark = "postmark"
	ProviderSES      = "ses"
	ProviderSendGrid = "sendgrid"
	ProviderTwilio   = "twilio"
	ProviderExpo     = "expo"
)

// The channels a report concerns, as [Report.Channel] names them: the
// channel names the delivery modules are registered under.
const (
	ChannelMail = "mail"
	ChannelSMS  = "sms"
	ChannelPush = "push"
)

// Report is what one provider said happened to one message for one
// address: a bounce, a complaint, an unsubscribe, a delivery, a push
// receipt. Receivers build Reports from verified requests and hand them to
// a [Store]; [Expo.Receipts] builds them from Expo's receipts.
//
// Every Report a receiver builds has a Provider, an EventID, a valid Class,
// a Channel and a Code. The JSON tags are the names a stored report keeps.
type Report struct {
	// Provider is the provider that reported, one of the Provider
	// constants, such as "resend".
	Provider string `json:"provider"`

	// EventID is the provider's id for the event, the key that makes a
	// redelivered report a duplicate: svix-id for Resend, the SNS
	// MessageId for SES, sg_event_id for SendGrid, MessageSid and status
	// for a Twilio status callback, the receipt (ticket) id for Expo.
	// Where one event names several recipients, each recipient's report
	// has the event's id followed by "/" and the recipient's index in the
	// event, from 0, so the id is the same on every redelivery. Where a
	// provider gives no id (Postmark's SubscriptionChange, Delivery, Open
	// and Click), it is derived from the event's fields by a hash: the
	// record type, ":" and 32 hex digits. It never holds an address.
	EventID string `json:"event_id"`

	// Type is the provider's own name for the event, verbatim, such as
	// "email.bounced", "Bounce", "dropped" or "undelivered".
	Type string `json:"type"`

	// Class says what the report means for the address; see [Class].
	Class Class `json:"class"`

	// Channel is the channel concerned: ChannelMail, ChannelSMS or
	// ChannelPush.
	Channel string `json:"channel"`

	// Address is the address the report concerns, normalised by
	// [NormalizeAddress]: an email address, an E.164 phone number or a
	// push token. It is empty when the report names only the message
	// (an Expo receipt without a token) or cannot tell which of a
	// message's recipients it is about.
	//
	// Address is personal data: never log it, never put it into an error,
	// a metric, a span or a NOTIFY payload.
	Address string `json:"address,omitempty"`

	// MessageID is the provider's id of the message the report is about,
	// the reference a delivery module stored when it sent it: the Resend
	// email id, the Postmark MessageID, the SES mail.messageId, the
	// SendGrid message id (sg_message_id without the suffix SendGrid adds
	// to it), the Twilio MessageSid, the Expo ticket id. It is empty when
	// the report is not about a message we sent (an inbound STOP).
	MessageID string `json:"message_id,omitempty"`

	// Code is a stable machine reason code for grouping, one of the Code
	// constants or, for Twilio and Expo errors, "twilio." followed by
	// Twilio's error code ("twilio.30007") and "expo." followed by Expo's
	// error in snake case ("expo.device_not_registered").
	Code string `json:"code"`

	// Detail is a short text for a person, built only from the provider's
	// enumerated values (types, sub-types, status codes): never an
	// address, a name, a subject or a provider's free text, which can
	// quote the address.
	Detail string `json:"detail,omitempty"`

	// OccurredAt is when the provider says the event happened, in UTC. It
	// is the zero time when the report carries none (Twilio, Expo) or one
	// that does not parse.
	OccurredAt time.Time `json:"occurred_at,omitzero"`
}

// Class is what a report means for the address it names, which decides
// what a later layer does with it (suppress the address, count a
// transient failure, invalidate a push token, only record it).
type Class string

// The classes.
const (
	// ClassPermanent: the address cannot receive messages: a hard
	// bounce, an unknown number, an unregistered push token.
	ClassPermanent Class = "permanent"

	// ClassTransient: the address could not receive this message, or
	// not yet (a soft bounce, a full mailbox, a delay, a handset out of
	// reach). One is no reason to stop; many in a short time may be.
	ClassTransient Class = "transient"

	// ClassComplaint: the person marked the message as spam.
	ClassComplaint Class = "complaint"

	// ClassUnsubscribe: the person asked for no more messages (a
	// List-Unsubscribe, an SMS STOP).
	ClassUnsubscribe Class = "unsubscribe"

	// ClassResubscribe: the person asked for messages again after an
	// unsubscribe (an SMS START, a SendGrid group resubscribe).
	ClassResubscribe Class = "resubscribe"

	// ClassDelivered: the provider delivered the message, or the person
	// opened, clicked or read it.
	ClassDelivered Class = "delivered"

	// ClassOurSide: the message failed for a reason on the sender's side
	// (credentials, content filtering, sender reputation, authentication,
	// a payload too big, a send rate too high). It never says anything
	// about the person's address.
	ClassOurSide Class = "our_side"

	// ClassNone: nothing to do for the address: the provider accepted or
	// is processing the message, an auto-reply, a not-spam report, an
	// event this package does not know.
	ClassNone Class = "none"
)

// Valid reports whether c is one of the Class constants.
func (c Class) Valid() bool {
	switch c {
	case ClassPermanent, ClassTransient, ClassComplaint, ClassUnsubscribe, ClassResubscribe,
		ClassDelivered, ClassOurSide, ClassNone:
		return true
	}
	return false
}

// The reason codes of [Report.Code] that do not carry a provider's own
// error code.
const (
	CodeBouncePermanent    = "bounce.permanent"    // the address does not exist or refuses mail for good
	CodeBounceTransient    = "bounce.transient"    // a soft bounce: full mailbox, DNS trouble, the server said later
	CodeBounceUndetermined = "bounce.undetermined" // the provider could not tell permanent from transient
	CodeBounceContent      = "bounce.content"      // refused for what was sent: content, size, attachment, virus, spam filter
	CodeBounceBlocked      = "bounce.blocked"      // refused for who sent it: sender reputation, a blocklist
	CodeAuthFailure        = "auth_failure"        // the sender's authentication failed (DMARC, an auth-failure report)
	CodeDelayed            = "delivery.delayed"    // the provider is still trying
	CodeComplaint          = "complaint"           // marked as spam
	CodeNotSpam            = "complaint.not_spam"  // marked as not spam: no complaint
	CodeUnsubscribe        = "unsubscribe"         // unsubscribed from everything
	CodeGroupUnsubscribe   = "unsubscribe.group"   // unsubscribed from one group (SendGrid's ASM groups)
	CodeResubscribe        = "resubscribe"         // subscribed again
	CodeGroupResubscribe   = "resubscribe.group"   // subscribed again to one group
	CodeDelivered          = "delivered"           // delivered
	CodeEngaged            = "engaged"             // opened, clicked or read
	CodeDropped            = "dropped"             // the provider would not send it, for a reason of its own
	CodeSendFailed         = "send.failed"         // the provider could not send it (rendering, an API error, a failed SMS)
	CodeIgnored            = "ignored"             // nothing to do
)

// NormalizeAddress returns address as reports carry it for channel, so a
// later layer compares the addresses it sends to with the same function:
//
//   - mail: the mailbox as the mail module sends to it, which
//     net/mail.ParseAddress reads ("Jane <Jane@Example.com>" and
//     "Jane@Example.com (Jane)" are both jane@example.com; when it cannot
//     read one, spaces trimmed and the address inside angle brackets if
//     there are some), and all of it lower-cased, the
//     local part too. RFC 5321 lets a server tell "Jane" from "jane", but
//     the providers themselves fold case in their suppression lists, and
//     a suppression that misses a bounced address because of its case
//     costs more than one that covers a mailbox differing only in case.
//   - sms: spaces trimmed; the E.164 number is kept as the provider gave
//     it.
//   - push, and any other channel: spaces trimmed.
func NormalizeAddress(channel, address string) string {
	address = strings.TrimSpace(address)
	if channel != ChannelMail {
		return address
	}
	if a, err := mail.ParseAddress(address); err == nil {
		return strings.ToLower(a.Address)
	}
	if open := strings.LastIndexByte(address, '<'); open >= 0 {
		if end := strings.IndexByte(address[open:], '>'); end > 0 {
			address = strings.TrimSpace(address[open+1 : open+end])
		}
	}
	return strings.ToLower(address)
}

// recipientEventID is the event id of the i-th of n recipients of the
// event id: the id itself when the event names one recipient.
func recipientEventID(id string, i, n int) string {
	if n <= 1 {
		return id
	}
	return id + "/" + strconv.Itoa(i)
}

// derivedEventID is an event id for an event the provider gives no id:
// kind, ":" and 32 hex digits of a hash of parts, each length-prefixed so
// that no two lists of parts collide.
func derivedEventID(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return kind + ":" + hex.EncodeToString(h.Sum(nil))[:32]
}

// enumPattern is what a provider's enumerated value may look like to go
// into a Detail: a word or a few, never an address, a number or a token.
var enumPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9 _-]{0,39}$`)

// statusPattern is an SMTP enhanced status code, such as 5.1.1.
var statusPattern = regexp.MustCompile(`^[245]\.[0-9]{1,3}\.[0-9]{1,3}$`)

// detail joins the values that may go into a Detail: each is kept only
// when it is a provider's enumerated value or an SMTP status code.
func detail(values ...string) string {
	var kept []string
	for _, v := range values {
		if enumPattern.MatchString(v) || statusPattern.MatchString(v) {
			kept = append(kept, v)
		}
	}
	return strings.Join(kept, " ")
}

// parseTime reads an RFC 3339 time, in UTC; the zero time when s is not
// one.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// EventIDMax is the longest [Report.EventID] a receiver accepts, in bytes.
const EventIDMax = 256

// validID reports whether id can key a report: not empty, at most
// EventIDMax bytes, printable UTF-8, so that it survives storage as text
// and two ids never collapse into one.
func validID(id string) bool {
	return id != "" && len(id) <= EventIDMax && utf8.ValidString(id) && !strings.ContainsFunc(id, unicode.IsControl)
}

// finish checks the event ids of a parser's reports and makes their other
// texts what a JSON or text column keeps: valid UTF-8 without a NUL, each
// bad byte U+FFFD. A report PostgreSQL refused would fail its Store every
// time the provider posted it again, with the good reports of its batch.
// An id it cannot keep is an ErrPayload error.
func finish(reports []Report) ([]Report, error) {
	for i := range reports {
		r := &reports[i]
		if !validID(r.EventID) {
			return nil, fmt.Errorf("%w: an event id that is empty, longer than %d bytes or not printable UTF-8", ErrPayload, EventIDMax)
		}
		for _, s := range []*string{&r.Type, &r.Address, &r.MessageID, &r.Code, &r.Detail} {
			*s = storable(*s)
		}
	}
	return reports, nil
}

// storable is s as PostgreSQL's text and jsonb store it: each NUL byte and
// each run of invalid UTF-8 replaced by U+FFFD.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
