package feedback_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// Svix's worked example of its scheme, from "Verifying Webhooks Manually"
// (https://docs.svix.com/receiving/verifying-payloads/how-manual) and the
// verification snippet Svix's customers republish
// (https://developer.ongoody.com/webhooks/webhook-security).
const (
	svixDocSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	svixDocID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	svixDocTimestamp = "1614265330"
	svixDocSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	svixDocBody      = `{"test": 2432232314}`
)

// Test secrets, written as Resend shows them.
var (
	resendSecretA = "whsec_" + base64.StdEncoding.EncodeToString([]byte("tidings feedback resend secret A"))
	resendSecretB = "whsec_" + base64.StdEncoding.EncodeToString([]byte("tidings feedback resend secret B"))
)

// svixHeader signs body as Resend would at t, with each secret in turn (a
// rotation signs with the old and the new).
func svixHeader(t testing.TB, id string, at time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	var sigs []string
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		require.NoError(t, err)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(feedback.SvixSign(key, id, ts, body)))
	}
	h := http.Header{}
	h.Set(feedback.SvixIDHeader, id)
	h.Set(feedback.SvixTimestampHeader, ts)
	h.Set(feedback.SvixSignatureHeader, strings.Join(sigs, " "))
	return h
}

func TestVerifySvixDocExample(t *testing.T) {
	t.Parallel()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(svixDocSecret, "whsec_"))
	require.NoError(t, err)
	header := http.Header{}
	header.Set(feedback.SvixIDHeader, svixDocID)
	header.Set(feedback.SvixTimestampHeader, svixDocTimestamp)
	header.Set(feedback.SvixSignatureHeader, svixDocSignature)
	ts, err := strconv.ParseInt(svixDocTimestamp, 10, 64)
	require.NoError(t, err)
	now := time.Unix(ts, 0)

	id, err := feedback.VerifySvix([][]byte{key}, header, []byte(svixDocBody), now, 5*time.Minute)
	require.NoError(t, err)
	require.Equal(t, svixDocID, id)

	_, err = feedback.VerifySvix([][]byte{key}, header, []byte(svixDocBody+" "), now, 5*time.Minute)
	require.ErrorIs(t, err, feedback.ErrSignature)
	_, err = feedback.VerifySvix([][]byte{key}, header, []byte(svixDocBody), now.Add(6*time.Minute), 5*time.Minute)
	require.ErrorIs(t, err, feedback.ErrTimestamp)
	_, err = feedback.VerifySvix([][]byte{key}, header, []byte(svixDocBody), now.Add(-6*time.Minute), 5*time.Minute)
	require.ErrorIs(t, err, feedback.ErrTimestamp)
}

func TestParseSvixSignatures(t *testing.T) {
	t.Parallel()
	sig := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"", 0},
		{"v1," + sig, 1},
		{"v1," + sig + " v1," + sig, 2},
		{"  v1," + sig + "   v2," + sig + " ", 1}, // another version is left out
		{"v1,not-base64", 0},
		{"v1," + base64.StdEncoding.EncodeToString([]byte("short")), 0},
		{"v1" + sig, 0},
	} {
		require.Len(t, feedback.ParseSvixSignatures(tc.header), tc.want, "%q", tc.header)
	}
}

func TestResendReceiver(t *testing.T) {
	t.Parallel()
	body := sample(t, "resend", "bounced.json")
	now := time.Now()
	signed := func(b []byte, at time.Time, secrets ...string) http.Header {
		return svixHeader(t, "msg_2bH7kNwP5mQaV1sXgIdKe6pZr", at, b, secrets...)
	}
	without := func(name string) http.Header {
		h := signed(body, now, resendSecretA)
		h.Del(name)
		return h
	}
	newHandler := func(store feedback.Store) http.Handler {
		h, err := feedback.NewResend(&feedback.ResendConfig{Secrets: []string{resendSecretA}}, store)
		require.NoError(t, err)
		return h
	}
	runHandlerCases(t, newHandler, []handlerCase{
		{name: "Signed", header: signed(body, now, resendSecretA), body: body, status: http.StatusNoContent, stored: true},
		{name: "RotationSignsWithBoth", header: signed(body, now, resendSecretB, resendSecretA), body: body, status: http.StatusNoContent, stored: true},
		{name: "AtTheEdgeOfTheTolerance", header: signed(body, now.Add(-4*time.Minute), resendSecretA), body: body, status: http.StatusNoContent, stored: true},
		{name: "TamperedBody", header: signed(body, now, resendSecretA), body: append([]byte(" "), body...), status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "WrongSecret", header: signed(body, now, resendSecretB), body: body, status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "TooOld", header: signed(body, now.Add(-6*time.Minute), resendSecretA), body: body, status: http.StatusUnauthorized, errText: feedback.ErrTimestamp.Error()},
		{name: "TooFarAhead", header: signed(body, now.Add(6*time.Minute), resendSecretA), body: body, status: http.StatusUnauthorized, errText: feedback.ErrTimestamp.Error()},
		{name: "NoID", header: without(feedback.SvixIDHeader), body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "NoTimestamp", header: without(feedback.SvixTimestampHeader), body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "NoSignature", header: without(feedback.SvixSignatureHeader), body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "VerifiedButNotJSON", header: signed([]byte("not json"), now, resendSecretA), body: []byte("not json"), status: http.StatusBadRequest, errText: feedback.ErrPayload.Error()},
		{name: "StoreFails", header: signed(body, now, resendSecretA), body: body, storeErr: errStoreDown, status: http.StatusServiceUnavailable, stored: true, errText: feedback.ErrStore.Error()},
		{name: "Get", method: http.MethodGet, status: http.StatusMethodNotAllowed},
	})

	t.Run("TwoSecretsConfigured", func(t *testing.T) {
		t.Parallel()
		store := &recordingStore{}
		h, err := feedback.NewResend(&feedback.ResendConfig{Secrets: []string{resendSecretA, resendSecretB}}, store)
		require.NoError(t, err)
		rec := post(t, h, signed(body, now, resendSecretB), body)
		require.Equal(t, http.StatusNoContent, rec.Code)
		require.Len(t, store.Calls(), 1)
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		store := &recordingStore{}
		h, err := feedback.NewResend(&feedback.ResendConfig{
			HandlerConfig: feedback.HandlerConfig{MaxBodyBytes: int64(len(body) - 1)},
			Secrets:       []string{resendSecretA},
		}, store)
		require.NoError(t, err)
		rec := post(t, h, signed(body, now, resendSecretA), body)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		require.Empty(t, store.Calls())
	})

	t.Run("StoredReports", func(t *testing.T) {
		t.Parallel()
		store := &recordingStore{}
		h := newHandler(store)
		rec := post(t, h, signed(body, now, resendSecretA), body)
		require.Equal(t, http.StatusNoContent, rec.Code)
		require.Equal(t, [][]feedback.Report{{{
			Provider:   feedback.ProviderResend,
			EventID:    "msg_2bH7kNwP5mQaV1sXgIdKe6pZr",
			Type:       "email.bounced",
			Class:      feedback.ClassPermanent,
			Channel:    feedback.ChannelMail,
			Address:    "delivered@resend.dev",
			MessageID:  "56761188-7520-42d8-8898-ff6fc54ce618",
			Code:       feedback.CodeBouncePermanent,
			Detail:     "Permanent Suppressed",
			OccurredAt: time.Date(2026, 11, 22, 23, 41, 12, 126e6, time.UTC),
		}}}, store.Calls())
	})
}

func TestNewResendConfig(t *testing.T) {
	t.Parallel()
	store := &recordingStore{}
	for _, tc := range []struct {
		name string
		cfg  *feedback.ResendConfig
		want string
	}{
		{"Nil", nil, "ResendConfig is nil"},
		{"NoSecret", &feedback.ResendConfig{}, "Secrets is empty"},
		{"NoPrefix", &feedback.ResendConfig{Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, "Secrets[0] does not start with whsec_"},
		{"NotBase64", &feedback.ResendConfig{Secrets: []string{"whsec_%%%"}}, "Secrets[0] is not base64"},
		{"Short", &feedback.ResendConfig{Secrets: []string{"whsec_c2hvcnQ="}}, "Secrets[0] is shorter"},
		{"NegativeTolerance", &feedback.ResendConfig{Secrets: []string{resendSecretA}, Tolerance: -time.Second}, "Tolerance is negative"},
		{"NegativeBody", &feedback.ResendConfig{Secrets: []string{resendSecretA}, HandlerConfig: feedback.HandlerConfig{MaxBodyBytes: -1}}, "MaxBodyBytes is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := feedback.NewResend(tc.cfg, store)
			require.ErrorContains(t, err, tc.want)
			if tc.cfg != nil {
				for _, s := range tc.cfg.Secrets {
					require.NotContains(t, err.Error(), strings.TrimPrefix(s, "whsec_"), "the error quotes a secret")
				}
			}
		})
	}
	_, err := feedback.NewResend(&feedback.ResendConfig{Secrets: []string{resendSecretA}}, nil)
	require.ErrorContains(t, err, "Store is nil")
}

// TestParseResend classifies Resend's sample payloads, from the pages of
// each event under https://resend.com/docs/webhooks/emails/ (bounced,
// complained, delivered, delivery-delayed).
func TestParseResend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file  string
		class feedback.Class
		code  string
	}{
		{"bounced.json", feedback.ClassPermanent, feedback.CodeBouncePermanent},
		{"complained.json", feedback.ClassComplaint, feedback.CodeComplaint},
		{"delivered.json", feedback.ClassDelivered, feedback.CodeDelivered},
		{"delivery_delayed.json", feedback.ClassTransient, feedback.CodeDelayed},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			reports, err := feedback.ParseResend("msg_1", sample(t, "resend", tc.file))
			require.NoError(t, err)
			require.Len(t, reports, 1)
			requireValid(t, reports)
			r := reports[0]
			require.Equal(t, tc.class, r.Class)
			require.Equal(t, tc.code, r.Code)
			require.Equal(t, "msg_1", r.EventID)
			require.Equal(t, "delivered@resend.dev", r.Address)
			require.Equal(t, "56761188-7520-42d8-8898-ff6fc54ce618", r.MessageID)
		})
	}

	t.Run("BounceTypes", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			typ, sub string
			class    feedback.Class
			code     string
		}{
			{"Permanent", "General", feedback.ClassPermanent, feedback.CodeBouncePermanent},
			{"Transient", "MailboxFull", feedback.ClassTransient, feedback.CodeBounceTransient},
			{"Transient", "ContentRejected", feedback.ClassOurSide, feedback.CodeBounceContent},
			{"Transient", "MessageTooLarge", feedback.ClassOurSide, feedback.CodeBounceContent},
			{"Undetermined", "Undetermined", feedback.ClassTransient, feedback.CodeBounceUndetermined},
		} {
			body := `{"type":"email.bounced","data":{"email_id":"e1","to":"Jane@Example.COM","bounce":{"type":"` + tc.typ + `","subType":"` + tc.sub + `"}}}`
			reports, err := feedback.ParseResend("msg_1", []byte(body))
			require.NoError(t, err)
			require.Len(t, reports, 1)
			require.Equal(t, tc.class, reports[0].Class, "%s/%s", tc.typ, tc.sub)
			require.Equal(t, tc.code, reports[0].Code, "%s/%s", tc.typ, tc.sub)
			require.Equal(t, "jane@example.com", reports[0].Address)
		}
	})

	t.Run("SeveralRecipients", func(t *testing.T) {
		t.Parallel()
		delivered := `{"type":"email.delivered","data":{"email_id":"e1","to":["a@example.com","b@example.com"]}}`
		reports, err := feedback.ParseResend("msg_1", []byte(delivered))
		require.NoError(t, err)
		require.Len(t, reports, 2)
		require.Equal(t, "msg_1/0", reports[0].EventID)
		require.Equal(t, "a@example.com", reports[0].Address)
		require.Equal(t, "msg_1/1", reports[1].EventID)
		require.Equal(t, "b@example.com", reports[1].Address)

		// Resend does not say which recipient bounced: suppress none.
		bounced := `{"type":"email.bounced","data":{"email_id":"e1","to":["a@example.com","b@example.com"],"bounce":{"type":"Permanent"}}}`
		reports, err = feedback.ParseResend("msg_1", []byte(bounced))
		require.NoError(t, err)
		require.Len(t, reports, 1)
		require.Equal(t, "msg_1", reports[0].EventID)
		require.Empty(t, reports[0].Address)
		require.Equal(t, feedback.ClassPermanent, reports[0].Class)
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{``, `[]`, `{"data":{}}`, `{"type":"email.sent","data":{"to":7}}`} {
			_, err := feedback.ParseResend("msg_1", []byte(body))
			require.ErrorIs(t, err, feedback.ErrPayload, "%s", body)
		}
	})
}
