package feedback_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" // SNS signature version 1 is SHA1withRSA.
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

const (
	sesTopic      = "arn:aws:sns:us-east-1:123456789012:ses-feedback"
	sesOtherTopic = "arn:aws:sns:us-east-1:123456789012:someone-else"
)

// snsKeys are the RSA keys the tests sign with: made once, since
// generating one takes a while under the race detector.
var snsKeys = sync.OnceValue(func() [2]*rsa.PrivateKey {
	var keys [2]*rsa.PrivateKey
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// snsHost plays SNS's certificate host and subscription endpoint over
// HTTPS, with a signing certificate made for the test.
type snsHost struct {
	srv         *httptest.Server
	key         *rsa.PrivateKey
	certFetches atomic.Int32
	confirms    atomic.Int32
	// failCert makes the certificate path answer 500.
	failCert atomic.Bool
}

// newSNSHost starts a host whose certificate holds the first test key.
func newSNSHost(t *testing.T) *snsHost {
	t.Helper()
	h := &snsHost{key: snsKeys()[0]}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sns.us-east-1.amazonaws.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &h.key.PublicKey, h.key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /SimpleNotificationService-test.pem", func(w http.ResponseWriter, _ *http.Request) {
		h.certFetches.Add(1)
		if h.failCert.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(certPEM)
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("Action") == "ConfirmSubscription" {
			h.confirms.Add(1)
			_, _ = w.Write([]byte("<ConfirmSubscriptionResponse/>"))
			return
		}
		http.NotFound(w, r)
	})
	h.srv = httptest.NewTLSServer(mux)
	t.Cleanup(h.srv.Close)
	return h
}

// certURL is the URL of the host's signing certificate.
func (h *snsHost) certURL() string { return h.srv.URL + "/SimpleNotificationService-test.pem" }

// config is an SESConfig that trusts the host.
func (h *snsHost) config() *feedback.SESConfig {
	return &feedback.SESConfig{
		TopicARNs:  []string{sesTopic},
		CertHost:   `127\.0\.0\.1:[0-9]+`,
		HTTPClient: h.srv.Client(),
	}
}

// snsFields are the fields of an SNS message a test sets.
type snsFields struct {
	Type, MessageID, TopicArn, Message, Timestamp, Token, SubscribeURL, SigningCertURL string
	Subject                                                                            *string
}

// signSNS signs f as SNS would, with key and signature version, building
// the string to sign from the field lists of "Verifying the signatures of
// Amazon SNS messages"
// (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html),
// and returns the JSON body.
func signSNS(t testing.TB, f snsFields, key *rsa.PrivateKey, version string) []byte {
	t.Helper()
	var s string
	add := func(name, value string) { s += name + "\n" + value + "\n" }
	add("Message", f.Message)
	add("MessageId", f.MessageID)
	if f.Type == "Notification" {
		if f.Subject != nil {
			add("Subject", *f.Subject)
		}
		add("Timestamp", f.Timestamp)
	} else {
		add("SubscribeURL", f.SubscribeURL)
		add("Timestamp", f.Timestamp)
		add("Token", f.Token)
	}
	add("TopicArn", f.TopicArn)
	add("Type", f.Type)
	var sig []byte
	var err error
	if version == "1" {
		sum := sha1.Sum([]byte(s)) // the scheme's own hash
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA1, sum[:])
	} else {
		sum := sha256.Sum256([]byte(s))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	}
	require.NoError(t, err)
	m := map[string]any{
		"Type":             f.Type,
		"MessageId":        f.MessageID,
		"TopicArn":         f.TopicArn,
		"Message":          f.Message,
		"Timestamp":        f.Timestamp,
		"SignatureVersion": version,
		"Signature":        base64.StdEncoding.EncodeToString(sig),
		"SigningCertURL":   f.SigningCertURL,
	}
	if f.Subject != nil {
		m["Subject"] = *f.Subject
	}
	if f.Type != "Notification" {
		m["Token"] = f.Token
		m["SubscribeURL"] = f.SubscribeURL
	}
	body, err := json.Marshal(m)
	require.NoError(t, err)
	return body
}

// notification is a Notification of message from the test topic at t,
// with the host's certificate.
func (h *snsHost) notification(message []byte, at time.Time) snsFields {
	return snsFields{
		Type:           "Notification",
		MessageID:      "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
		TopicArn:       sesTopic,
		Message:        string(message),
		Timestamp:      at.UTC().Format("2006-01-02T15:04:05.000Z"),
		SigningCertURL: h.certURL(),
	}
}

// confirmation is a SubscriptionConfirmation of the test topic.
func (h *snsHost) confirmation(topic string) snsFields {
	return snsFields{
		Type:           "SubscriptionConfirmation",
		MessageID:      "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
		TopicArn:       topic,
		Message:        "You have chosen to subscribe to the topic.",
		Token:          "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3",
		SubscribeURL:   h.srv.URL + "/?Action=ConfirmSubscription&TopicArn=" + url.QueryEscape(topic) + "&Token=2336412f",
		Timestamp:      time.Now().UTC().Format(time.RFC3339Nano),
		SigningCertURL: h.certURL(),
	}
}

func TestSESReceiver(t *testing.T) {
	t.Parallel()
	message := sample(t, "ses", "bounce_no_dsn.json")
	now := time.Now()
	keys := snsKeys()

	// Each case gets its own host, so that fetches and confirmations
	// are its own.
	type sesCase struct {
		name     string
		body     func(h *snsHost) []byte
		config   func(h *snsHost, cfg *feedback.SESConfig)
		before   func(h *snsHost)
		storeErr error
		status   int
		reports  int // how many reports the one Store call must have; 0: no call
		fetches  int32
		confirms int32
	}
	with := func(mod func(*snsFields), key *rsa.PrivateKey, version string) func(h *snsHost) []byte {
		return func(h *snsHost) []byte {
			f := h.notification(message, now)
			if mod != nil {
				mod(&f)
			}
			return signSNS(t, f, key, version)
		}
	}
	subject := "Amazon SES Email Event Notification"
	for _, tc := range []sesCase{
		{name: "SignatureVersion1", body: with(nil, keys[0], "1"), status: http.StatusOK, reports: 2, fetches: 1},
		{name: "SignatureVersion2", body: with(nil, keys[0], "2"), status: http.StatusOK, reports: 2, fetches: 1},
		{name: "WithSubject", body: with(func(f *snsFields) { f.Subject = &subject }, keys[0], "2"), status: http.StatusOK, reports: 2, fetches: 1},
		{name: "TamperedMessage", body: func(h *snsHost) []byte {
			var m map[string]any
			require.NoError(t, json.Unmarshal(with(nil, keys[0], "2")(h), &m))
			m["Message"] = `{"notificationType":"Delivery","mail":{},"delivery":{"recipients":["x@example.com"]}}`
			b, _ := json.Marshal(m)
			return b
		}, status: http.StatusUnauthorized, fetches: 1},
		{name: "WrongKey", body: with(nil, keys[1], "2"), status: http.StatusUnauthorized, fetches: 1},
		{name: "UnknownSignatureVersion", body: with(nil, keys[0], "3"), status: http.StatusUnauthorized},
		{name: "TopicNotAllowed", body: with(func(f *snsFields) { f.TopicArn = sesOtherTopic }, keys[0], "2"), status: http.StatusUnauthorized},
		{name: "CertOnOtherHost", body: with(func(f *snsFields) {
			f.SigningCertURL = "https://sns.us-east-1.amazonaws.com.evil.example/SimpleNotificationService-test.pem"
		}, keys[0], "2"), status: http.StatusUnauthorized},
		{name: "CertOverHTTP", body: func(h *snsHost) []byte {
			return with(func(f *snsFields) { f.SigningCertURL = "http" + f.SigningCertURL[len("https"):] }, keys[0], "2")(h)
		}, status: http.StatusUnauthorized},
		{name: "TooOld", body: with(func(f *snsFields) {
			f.Timestamp = now.Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
		}, keys[0], "2"), status: http.StatusUnauthorized, fetches: 1},
		{name: "TooFarAhead", body: with(func(f *snsFields) {
			f.Timestamp = now.Add(2 * time.Hour).UTC().Format(time.RFC3339Nano)
		}, keys[0], "2"), status: http.StatusUnauthorized, fetches: 1},
		{name: "NoSignature", body: func(h *snsHost) []byte {
			var m map[string]any
			require.NoError(t, json.Unmarshal(with(nil, keys[0], "2")(h), &m))
			delete(m, "Signature")
			b, _ := json.Marshal(m)
			return b
		}, status: http.StatusUnauthorized},
		{name: "NotSNS", body: func(*snsHost) []byte { return message }, status: http.StatusUnauthorized},
		{name: "CertHostDown", body: with(nil, keys[0], "2"), before: func(h *snsHost) { h.failCert.Store(true) }, status: http.StatusServiceUnavailable, fetches: 1},
		{name: "VerifiedButNotSES", body: with(func(f *snsFields) { f.Message = "hello" }, keys[0], "2"), status: http.StatusBadRequest, fetches: 1},
		{name: "StoreFails", body: with(nil, keys[0], "2"), storeErr: errStoreDown, status: http.StatusServiceUnavailable, reports: 2, fetches: 1},
		{name: "Confirmation", body: func(h *snsHost) []byte { return signSNS(t, h.confirmation(sesTopic), keys[0], "1") }, status: http.StatusOK, fetches: 1, confirms: 1},
		{name: "ConfirmationOfOtherTopic", body: func(h *snsHost) []byte { return signSNS(t, h.confirmation(sesOtherTopic), keys[0], "1") }, status: http.StatusUnauthorized},
		{name: "ConfirmationElsewhere", body: func(h *snsHost) []byte {
			f := h.confirmation(sesTopic)
			f.SubscribeURL = "https://sns.us-east-1.amazonaws.com.evil.example/?Action=ConfirmSubscription"
			return signSNS(t, f, keys[0], "1")
		}, status: http.StatusUnauthorized, fetches: 1},
		{name: "UnsubscribeConfirmation", body: func(h *snsHost) []byte {
			f := h.confirmation(sesTopic)
			f.Type = "UnsubscribeConfirmation"
			return signSNS(t, f, keys[0], "2")
		}, status: http.StatusOK, fetches: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			host := newSNSHost(t)
			if tc.before != nil {
				tc.before(host)
			}
			store := &recordingStore{err: tc.storeErr}
			h, err := feedback.NewSES(host.config(), store)
			require.NoError(t, err)
			rec := post(t, h, nil, tc.body(host))
			require.Equal(t, tc.status, rec.Code, "answer: %s", rec.Body.String())
			require.Equal(t, tc.fetches, host.certFetches.Load(), "certificate fetches")
			require.Equal(t, tc.confirms, host.confirms.Load(), "confirmations")
			calls := store.Calls()
			if tc.reports == 0 {
				require.Empty(t, calls, "the Store was called")
				return
			}
			require.Len(t, calls, 1)
			require.Len(t, calls[0], tc.reports)
			requireValid(t, calls[0])
		})
	}

	t.Run("CachesTheCertificate", func(t *testing.T) {
		t.Parallel()
		host := newSNSHost(t)
		store := &recordingStore{}
		h, err := feedback.NewSES(host.config(), store)
		require.NoError(t, err)
		for range 3 {
			rec := post(t, h, nil, signSNS(t, host.notification(message, time.Now()), keys[0], "2"))
			require.Equal(t, http.StatusOK, rec.Code)
		}
		require.Equal(t, int32(1), host.certFetches.Load())
		require.Len(t, store.Calls(), 3)
	})

	t.Run("DefaultHostRefusesTheTestHost", func(t *testing.T) {
		t.Parallel()
		host := newSNSHost(t)
		cfg := host.config()
		cfg.CertHost = ""
		h, err := feedback.NewSES(cfg, &recordingStore{})
		require.NoError(t, err)
		rec := post(t, h, nil, signSNS(t, host.notification(message, time.Now()), keys[0], "2"))
		require.Equal(t, http.StatusUnauthorized, rec.Code)
		require.Zero(t, host.certFetches.Load())
	})

	t.Run("StoredReports", func(t *testing.T) {
		t.Parallel()
		host := newSNSHost(t)
		store := &recordingStore{}
		h, err := feedback.NewSES(host.config(), store)
		require.NoError(t, err)
		rec := post(t, h, nil, signSNS(t, host.notification(message, time.Now()), keys[0], "1"))
		require.Equal(t, http.StatusOK, rec.Code)
		calls := store.Calls()
		require.Len(t, calls, 1)
		require.Equal(t, []string{"22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324/0", "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324/1"},
			[]string{calls[0][0].EventID, calls[0][1].EventID})
		require.Equal(t, []string{"jane@example.com", "richard@example.com"}, []string{calls[0][0].Address, calls[0][1].Address})
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		_, err := feedback.NewSES(nil, &recordingStore{})
		require.ErrorContains(t, err, "SESConfig is nil")
		_, err = feedback.NewSES(&feedback.SESConfig{}, &recordingStore{})
		require.ErrorContains(t, err, "TopicARNs is empty")
		_, err = feedback.NewSES(&feedback.SESConfig{TopicARNs: []string{sesTopic}, CertHost: "("}, &recordingStore{})
		require.ErrorContains(t, err, "CertHost is not a regular expression")
		_, err = feedback.NewSES(&feedback.SESConfig{TopicARNs: []string{sesTopic}, Timeout: -1}, &recordingStore{})
		require.ErrorContains(t, err, "Timeout is negative")
		_, err = feedback.NewSES(&feedback.SESConfig{TopicARNs: []string{sesTopic}, Tolerance: -1}, &recordingStore{})
		require.ErrorContains(t, err, "Tolerance is negative")
	})
}

// TestParseSES classifies the examples of "Amazon SNS notification
// examples for Amazon SES"
// (https://docs.aws.amazon.com/ses/latest/dg/notification-examples.html).
func TestParseSES(t *testing.T) {
	t.Parallel()
	at := time.Date(2016, 1, 27, 14, 59, 38, 237e6, time.UTC)
	for _, tc := range []struct {
		file string
		want []feedback.Report
	}{
		{"bounce_dsn.json", []feedback.Report{{
			Provider: feedback.ProviderSES, EventID: "sns-1", Type: "Bounce", Class: feedback.ClassPermanent,
			Channel: feedback.ChannelMail, Address: "jane@example.com",
			MessageID: "00000138111222aa-33322211-cccc-cccc-cccc-ddddaaaa0680-000000",
			Code:      feedback.CodeBouncePermanent, Detail: "Permanent General 5.1.1", OccurredAt: at,
		}}},
		{"bounce_no_dsn.json", []feedback.Report{{
			Provider: feedback.ProviderSES, EventID: "sns-1/0", Type: "Bounce", Class: feedback.ClassPermanent,
			Channel: feedback.ChannelMail, Address: "jane@example.com",
			MessageID: "00000137860315fd-34208509-5b74-41f3-95c5-22c1edc3c924-000000",
			Code:      feedback.CodeBouncePermanent, Detail: "Permanent General", OccurredAt: at,
		}, {
			Provider: feedback.ProviderSES, EventID: "sns-1/1", Type: "Bounce", Class: feedback.ClassPermanent,
			Channel: feedback.ChannelMail, Address: "richard@example.com",
			MessageID: "00000137860315fd-34208509-5b74-41f3-95c5-22c1edc3c924-000000",
			Code:      feedback.CodeBouncePermanent, Detail: "Permanent General", OccurredAt: at,
		}}},
		{"complaint_feedback.json", []feedback.Report{{
			Provider: feedback.ProviderSES, EventID: "sns-1", Type: "Complaint", Class: feedback.ClassComplaint,
			Channel: feedback.ChannelMail, Address: "richard@example.com",
			MessageID: "000001378603177f-7a5433e7-8edb-42ae-af10-f0181f34d6ee-000000",
			Code:      feedback.CodeComplaint, Detail: "abuse", OccurredAt: at,
		}}},
		{"complaint_no_feedback.json", []feedback.Report{{
			Provider: feedback.ProviderSES, EventID: "sns-1", Type: "Complaint", Class: feedback.ClassComplaint,
			Channel: feedback.ChannelMail, Address: "richard@example.com",
			MessageID: "0000013786031775-163e3910-53eb-4c8e-a04a-f29debf88a84-000000",
			Code:      feedback.CodeComplaint, OccurredAt: at,
		}}},
		{"delivery.json", []feedback.Report{{
			Provider: feedback.ProviderSES, EventID: "sns-1", Type: "Delivery", Class: feedback.ClassDelivered,
			Channel: feedback.ChannelMail, Address: "jane@example.com",
			MessageID: "0000014644fe5ef6-9a483358-9170-4cb4-a269-f5dcdf415321-000000",
			Code:      feedback.CodeDelivered, OccurredAt: at,
		}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			reports, err := feedback.ParseSES("sns-1", sample(t, "ses", tc.file))
			require.NoError(t, err)
			requireValid(t, reports)
			require.Equal(t, tc.want, reports)
		})
	}

	t.Run("Kinds", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			message string
			class   feedback.Class
			code    string
		}{
			{`{"notificationType":"Bounce","bounce":{"bounceType":"Undetermined","bounceSubType":"Undetermined","bouncedRecipients":[{"emailAddress":"a@example.com"}]}}`, feedback.ClassTransient, feedback.CodeBounceUndetermined},
			{`{"notificationType":"Bounce","bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull","bouncedRecipients":[{"emailAddress":"a@example.com"}]}}`, feedback.ClassTransient, feedback.CodeBounceTransient},
			{`{"notificationType":"Bounce","bounce":{"bounceType":"Transient","bounceSubType":"AttachmentRejected","bouncedRecipients":[{"emailAddress":"a@example.com"}]}}`, feedback.ClassOurSide, feedback.CodeBounceContent},
			{`{"notificationType":"Complaint","complaint":{"complaintFeedbackType":"not-spam","complainedRecipients":[{"emailAddress":"a@example.com"}]}}`, feedback.ClassNone, feedback.CodeNotSpam},
			{`{"notificationType":"Complaint","complaint":{"complaintFeedbackType":"auth-failure","complainedRecipients":[{"emailAddress":"a@example.com"}]}}`, feedback.ClassOurSide, feedback.CodeAuthFailure},
			{`{"eventType":"Send","mail":{"messageId":"m1"}}`, feedback.ClassNone, feedback.CodeIgnored},
		} {
			reports, err := feedback.ParseSES("sns-1", []byte(tc.message))
			require.NoError(t, err, tc.message)
			requireValid(t, reports)
			require.Equal(t, tc.class, reports[0].Class, tc.message)
			require.Equal(t, tc.code, reports[0].Code, tc.message)
		}
	})

	// A delay counts against the address only when it is the recipient's
	// side that delays (AWS, "Contents of event data that Amazon SES
	// publishes to Amazon SNS", the delivery delay object): our IP
	// blocked, our account's mail seen as spam, SES's own trouble or
	// deferral say nothing of the person.
	t.Run("Delays", func(t *testing.T) {
		t.Parallel()
		for delay, class := range map[string]feedback.Class{
			"MailboxFull":                    feedback.ClassTransient,
			"RecipientServerError":           feedback.ClassTransient,
			"TransientCommunicationFailure":  feedback.ClassTransient,
			"General":                        feedback.ClassTransient,
			"Undetermined":                   feedback.ClassTransient,
			"SomethingNew":                   feedback.ClassTransient,
			"IPFailure":                      feedback.ClassOurSide,
			"SpamDetected":                   feedback.ClassOurSide,
			"InternalFailure":                feedback.ClassOurSide,
			"SendingDeferral":                feedback.ClassOurSide,
			"BYOIPHostNameLookupUnavailable": feedback.ClassOurSide,
		} {
			reports, err := feedback.ParseSES("sns-1", []byte(`{"eventType":"DeliveryDelay","deliveryDelay":{"delayType":"`+delay+
				`","delayedRecipients":[{"emailAddress":"a@example.com"}]}}`))
			require.NoError(t, err, delay)
			requireValid(t, reports)
			require.Equal(t, class, reports[0].Class, delay)
			require.Equal(t, feedback.CodeDelayed, reports[0].Code, delay)
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		for _, m := range []string{``, `hello`, `{}`, `{"notificationType":"Bounce"}`, `{"notificationType":"Delivery","delivery":{"recipients":"a"}}`} {
			_, err := feedback.ParseSES("sns-1", []byte(m))
			require.ErrorIs(t, err, feedback.ErrPayload, "%s", m)
		}
	})
}
