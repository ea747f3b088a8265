package feedback_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// SendGrid's own test vector of the Signed Event Webhook, from the tests
// of its Go library (sendgrid/sendgrid-go,
// helpers/eventwebhook/eventwebhook_test.go): the payload is the JSON
// encoding/json makes of its map, with the keys sorted.
const (
	sendgridVectorKey       = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA=="
	sendgridVectorSignature = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0="
	sendgridVectorTimestamp = "1588788367"
	sendgridVectorPayload   = `{"category":"example_payload","event":"test_event","message_id":"message_id"}`
)

// sendgridKey is a key pair made for a test, with its public key as
// SendGrid shows it.
type sendgridKey struct {
	private *ecdsa.PrivateKey
	public  string
}

func newSendGridKey(t testing.TB) sendgridKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	require.NoError(t, err)
	return sendgridKey{k, base64.StdEncoding.EncodeToString(der)}
}

// sign signs body at t as SendGrid does.
func (k sendgridKey) sign(t testing.TB, body []byte, at time.Time) http.Header {
	t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	sum := sha256.Sum256(append([]byte(ts), body...))
	sig, err := ecdsa.SignASN1(rand.Reader, k.private, sum[:])
	require.NoError(t, err)
	h := http.Header{}
	h.Set(feedback.SendGridSignatureHeader, base64.StdEncoding.EncodeToString(sig))
	h.Set(feedback.SendGridTimestampHeader, ts)
	return h
}

func TestVerifySendGridVector(t *testing.T) {
	t.Parallel()
	key, err := feedback.ParseSendGridKey(sendgridVectorKey)
	require.NoError(t, err)
	h := http.Header{}
	h.Set(feedback.SendGridSignatureHeader, sendgridVectorSignature)
	h.Set(feedback.SendGridTimestampHeader, sendgridVectorTimestamp)
	ts, err := strconv.ParseInt(sendgridVectorTimestamp, 10, 64)
	require.NoError(t, err)
	now := time.Unix(ts, 0)
	keys := []*ecdsa.PublicKey{key}

	require.NoError(t, feedback.VerifySendGrid(keys, h, []byte(sendgridVectorPayload), now, time.Minute))
	require.ErrorIs(t, feedback.VerifySendGrid(keys, h, []byte(sendgridVectorPayload+"\n"), now, time.Minute), feedback.ErrSignature)
	require.ErrorIs(t, feedback.VerifySendGrid(keys, h, []byte(sendgridVectorPayload), now.Add(2*time.Minute), time.Minute), feedback.ErrTimestamp)

	other, err := feedback.ParseSendGridKey(newSendGridKey(t).public)
	require.NoError(t, err)
	require.ErrorIs(t, feedback.VerifySendGrid([]*ecdsa.PublicKey{other}, h, []byte(sendgridVectorPayload), now, time.Minute), feedback.ErrSignature)
}

func TestSendGridReceiver(t *testing.T) {
	t.Parallel()
	body := sample(t, "sendgrid", "events.json")
	key, rotated := newSendGridKey(t), newSendGridKey(t)
	now := time.Now()
	without := func(name string) http.Header {
		h := key.sign(t, body, now)
		h.Del(name)
		return h
	}
	badSignature := key.sign(t, body, now)
	badSignature.Set(feedback.SendGridSignatureHeader, "not base64!")
	newHandler := func(store feedback.Store) http.Handler {
		h, err := feedback.NewSendGrid(&feedback.SendGridConfig{PublicKeys: []string{key.public, rotated.public}}, store)
		require.NoError(t, err)
		return h
	}
	runHandlerCases(t, newHandler, []handlerCase{
		{name: "Signed", header: key.sign(t, body, now), body: body, status: http.StatusNoContent, stored: true},
		{name: "SignedWithTheSecondKey", header: rotated.sign(t, body, now), body: body, status: http.StatusNoContent, stored: true},
		{name: "TamperedBody", header: key.sign(t, body, now), body: append(body, ' '), status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "WrongKey", header: newSendGridKey(t).sign(t, body, now), body: body, status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "NotBase64", header: badSignature, body: body, status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "TooOld", header: key.sign(t, body, now.Add(-11*time.Minute)), body: body, status: http.StatusUnauthorized, errText: feedback.ErrTimestamp.Error()},
		{name: "TooFarAhead", header: key.sign(t, body, now.Add(11*time.Minute)), body: body, status: http.StatusUnauthorized, errText: feedback.ErrTimestamp.Error()},
		{name: "NoSignature", header: without(feedback.SendGridSignatureHeader), body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "NoTimestamp", header: without(feedback.SendGridTimestampHeader), body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "VerifiedButAnObject", header: key.sign(t, []byte(`{"event":"bounce"}`), now), body: []byte(`{"event":"bounce"}`), status: http.StatusBadRequest},
		{name: "EmptyBatch", header: key.sign(t, []byte(`[]`), now), body: []byte(`[]`), status: http.StatusNoContent},
		{name: "StoreFails", header: key.sign(t, body, now), body: body, storeErr: errStoreDown, status: http.StatusServiceUnavailable, stored: true},
		{name: "Get", method: http.MethodGet, status: http.StatusMethodNotAllowed},
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		rsaDER := "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ0iT9wCS0DRTXu269V264Vf/3jvredZiKRkgwlL9xNAwxXFg0x/XFw005UWVRIkdgcKWTjpBP2dPwVZ4WWC+9aGVd+Gyn1o0CLelf4rEjGoXbAAEgAqeGUxrcIlbjXfbcmwIDAQAB"
		for _, tc := range []struct {
			keys []string
			want string
		}{
			{nil, "PublicKeys is empty"},
			{[]string{"%%%"}, "PublicKeys[0] is not base64"},
			{[]string{base64.StdEncoding.EncodeToString([]byte("nope"))}, "PublicKeys[0] is not a DER PKIX public key"},
			{[]string{rsaDER}, "PublicKeys[0] is not an ECDSA P-256 key"},
		} {
			_, err := feedback.NewSendGrid(&feedback.SendGridConfig{PublicKeys: tc.keys}, &recordingStore{})
			require.ErrorContains(t, err, tc.want)
		}
	})
}

// TestParseSendGrid classifies the events of the Event Webhook reference
// (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event),
// whose example holds one event of each type.
func TestParseSendGrid(t *testing.T) {
	t.Parallel()
	reports, err := feedback.ParseSendGrid(sample(t, "sendgrid", "events.json"))
	require.NoError(t, err)
	requireValid(t, reports)
	type got struct {
		typ    string
		class  feedback.Class
		code   string
		detail string
	}
	var gots []got
	for _, r := range reports {
		gots = append(gots, got{r.Type, r.Class, r.Code, r.Detail})
		require.Equal(t, "example@test.com", r.Address)
		require.Equal(t, time.Unix(1513299569, 0).UTC(), r.OccurredAt)
	}
	require.Equal(t, []got{
		{"processed", feedback.ClassNone, feedback.CodeIgnored, ""},
		{"deferred", feedback.ClassTransient, feedback.CodeDelayed, ""},
		{"delivered", feedback.ClassDelivered, feedback.CodeDelivered, ""},
		{"open", feedback.ClassDelivered, feedback.CodeEngaged, ""},
		{"click", feedback.ClassDelivered, feedback.CodeEngaged, ""},
		{"bounce", feedback.ClassPermanent, feedback.CodeBouncePermanent, "bounce Invalid Address 5.0.0"},
		{"bounce", feedback.ClassOurSide, feedback.CodeBounceBlocked, "blocked Reputation 5.7.1"},
		{"dropped", feedback.ClassPermanent, feedback.CodeBouncePermanent, "Bounced Address"},
		{"spamreport", feedback.ClassComplaint, feedback.CodeComplaint, ""},
		{"unsubscribe", feedback.ClassUnsubscribe, feedback.CodeUnsubscribe, ""},
		{"group_unsubscribe", feedback.ClassUnsubscribe, feedback.CodeGroupUnsubscribe, "asm_group_id 10"},
		{"group_resubscribe", feedback.ClassResubscribe, feedback.CodeGroupResubscribe, "asm_group_id 10"},
	}, gots)
	require.Equal(t, "rbtnWrG1DVDGGGFHFyun0A==", reports[0].EventID)
	require.Equal(t, "14c5d75ce93.dfd.64b469", reports[0].MessageID)
	require.Equal(t, "euo2iKxdSayPF4YE4--I7A", reports[6].MessageID)

	t.Run("Reasons", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			event string
			class feedback.Class
		}{
			{`{"event":"dropped","reason":"Unsubscribed Address","email":"a@example.com"}`, feedback.ClassUnsubscribe},
			{`{"event":"dropped","reason":"Spam Reporting Address","email":"a@example.com"}`, feedback.ClassComplaint},
			{`{"event":"dropped","reason":"Invalid SMTPAPI header","email":"a@example.com"}`, feedback.ClassOurSide},
			{`{"event":"dropped","reason":"a@example.com said no","email":"a@example.com"}`, feedback.ClassOurSide},
			{`{"event":"bounce","type":"bounce","bounce_classification":"Content","email":"a@example.com"}`, feedback.ClassOurSide},
			{`{"event":"bounce","type":"bounce","bounce_classification":"Frequency or Volume","email":"a@example.com"}`, feedback.ClassOurSide},
			{`{"event":"bounce","email":"a@example.com","reason":"550 5.1.1 unknown user a@example.com"}`, feedback.ClassPermanent},
			{`{"event":"something_new","email":"a@example.com"}`, feedback.ClassNone},
		} {
			reports, err := feedback.ParseSendGrid([]byte("[" + tc.event + "]"))
			require.NoError(t, err)
			requireValid(t, reports)
			require.Equal(t, tc.class, reports[0].Class, tc.event)
			require.NotContains(t, reports[0].Detail, "example.com", "the detail quotes the address")
			require.Regexp(t, `^[a-z_]+:[0-9a-f]{32}$`, reports[0].EventID, "an event without sg_event_id")
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{``, `{}`, `"events"`} {
			_, err := feedback.ParseSendGrid([]byte(body))
			require.ErrorIs(t, err, feedback.ErrPayload, "%s", body)
		}
	})

	// An event it cannot read is ignored, not the batch: refusing it would
	// lose the bounce beside it once SendGrid stopped posting it.
	t.Run("AnUnreadableEventIsIgnoredNotTheBatch", func(t *testing.T) {
		t.Parallel()
		reports, err := feedback.ParseSendGrid([]byte(`[{"event":"bounce","type":"bounce","email":"a@example.com","sg_event_id":"e1"},
			{"event":"group_unsubscribe","asm_group_id":"newsletter","email":"b@example.com"}, 1, {}, {"event":7}]`))
		require.NoError(t, err)
		requireValid(t, reports)
		require.Len(t, reports, 5)
		require.Equal(t, feedback.ClassPermanent, reports[0].Class)
		require.Equal(t, "a@example.com", reports[0].Address)
		for _, r := range reports[1:] {
			require.Equal(t, feedback.ClassNone, r.Class)
			require.Equal(t, "unreadable", r.Type)
			require.Empty(t, r.Address)
		}
		require.NotEqual(t, reports[3].EventID, reports[4].EventID, "each its own id, from its bytes")
	})
}
