package feedback_test

import (
	"crypto/hmac"
	"crypto/sha1" // Twilio's scheme is HMAC-SHA1.
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// The worked example of "Secure webhooks"
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security), as
// Twilio's Go library tests it (twilio/twilio-go,
// client/request_validator_test.go).
const (
	twilioDocURL       = "https://mycompany.com/myapp.php?foo=1&bar=2"
	twilioDocToken     = "12345"
	twilioDocSignature = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
)

var twilioDocParams = url.Values{
	"Digits":  {"1234"},
	"CallSid": {"CA1234567890ABCDE"},
	"To":      {"+18005551212"},
	"Caller":  {"+14158675309"},
	"From":    {"+14158675309"},
}

// The receiver's URL and tokens in the tests.
const (
	twilioURL       = "https://receiver.example/feedback/twilio?tenant=7"
	twilioToken     = "primary-auth-token-5a1e"
	twilioSecondary = "secondary-auth-token-77c0"
)

// twilioSign signs form-encoded body for publicURL with token, the way
// the documentation's worked example spells it out.
func twilioSign(t testing.TB, publicURL, token string, body []byte) http.Header {
	t.Helper()
	params, err := url.ParseQuery(string(body))
	require.NoError(t, err)
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	data := publicURL
	for _, name := range names {
		for _, v := range params[name] {
			data += name + v
		}
	}
	mac := hmac.New(sha1.New, []byte(token))
	mac.Write([]byte(data))
	h := http.Header{}
	h.Set(feedback.TwilioSignatureHeader, base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	return h
}

func TestVerifyTwilioDocExample(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set(feedback.TwilioSignatureHeader, twilioDocSignature)
	body := []byte(twilioDocParams.Encode())

	params, err := feedback.VerifyTwilio([]string{"another-token", twilioDocToken}, twilioDocURL, h, body)
	require.NoError(t, err)
	require.Equal(t, twilioDocParams, params)

	_, err = feedback.VerifyTwilio([]string{twilioDocToken}, twilioDocURL+"&baz=3", h, body)
	require.ErrorIs(t, err, feedback.ErrSignature)
	_, err = feedback.VerifyTwilio([]string{twilioDocToken}, twilioDocURL, h, append(body, []byte("&Digits=5")...))
	require.ErrorIs(t, err, feedback.ErrSignature)
	_, err = feedback.VerifyTwilio([]string{"54321"}, twilioDocURL, h, body)
	require.ErrorIs(t, err, feedback.ErrSignature)
}

func TestTwilioReceiver(t *testing.T) {
	t.Parallel()
	body := sample(t, "twilio", "status_undelivered.txt")
	newHandler := func(store feedback.Store) http.Handler {
		h, err := feedback.NewTwilio(&feedback.TwilioConfig{URL: twilioURL, AuthTokens: []string{twilioToken, twilioSecondary}}, store)
		require.NoError(t, err)
		return h
	}
	noSignature := twilioSign(t, twilioURL, twilioToken, body)
	noSignature.Del(feedback.TwilioSignatureHeader)
	runHandlerCases(t, newHandler, []handlerCase{
		{name: "Signed", header: twilioSign(t, twilioURL, twilioToken, body), body: body, status: http.StatusOK, stored: true},
		{name: "SignedWithTheSecondaryToken", header: twilioSign(t, twilioURL, twilioSecondary, body), body: body, status: http.StatusOK, stored: true},
		{name: "TamperedBody", header: twilioSign(t, twilioURL, twilioToken, body), body: append(body, []byte("&ErrorCode=30005")...), status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "WrongToken", header: twilioSign(t, twilioURL, "another-token", body), body: body, status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "OtherURL", header: twilioSign(t, "https://receiver.example/feedback/twilio", twilioToken, body), body: body, status: http.StatusUnauthorized, errText: feedback.ErrSignature.Error()},
		{name: "NoSignature", header: noSignature, body: body, status: http.StatusUnauthorized, errText: feedback.ErrMissingHeader.Error()},
		{name: "VerifiedButNoMessage", header: twilioSign(t, twilioURL, twilioToken, []byte("CallSid=CA1")), body: []byte("CallSid=CA1"), status: http.StatusBadRequest},
		{name: "StoreFails", header: twilioSign(t, twilioURL, twilioToken, body), body: body, storeErr: errStoreDown, status: http.StatusServiceUnavailable, stored: true},
		{name: "Get", method: http.MethodGet, status: http.StatusMethodNotAllowed},
	})

	t.Run("AnswersEmptyTwiML", func(t *testing.T) {
		t.Parallel()
		store := &recordingStore{}
		rec := post(t, newHandler(store), twilioSign(t, twilioURL, twilioToken, body), body)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "<Response></Response>")
		require.Equal(t, [][]feedback.Report{{{
			Provider:  feedback.ProviderTwilio,
			EventID:   "SM1342fe1b2c904d1ab04f0fc7a58abca9:undelivered",
			Type:      "undelivered",
			Class:     feedback.ClassTransient,
			Channel:   feedback.ChannelSMS,
			Address:   "+15558675310",
			MessageID: "SM1342fe1b2c904d1ab04f0fc7a58abca9",
			Code:      "twilio.30003",
			Detail:    "undelivered",
		}}}, store.Calls())
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			cfg  *feedback.TwilioConfig
			want string
		}{
			{nil, "TwilioConfig is nil"},
			{&feedback.TwilioConfig{AuthTokens: []string{twilioToken}}, "URL is not an absolute"},
			{&feedback.TwilioConfig{URL: "/feedback", AuthTokens: []string{twilioToken}}, "URL is not an absolute"},
			{&feedback.TwilioConfig{URL: twilioURL}, "AuthTokens is empty"},
			{&feedback.TwilioConfig{URL: twilioURL, AuthTokens: []string{""}}, "AuthTokens[0] is empty"},
		} {
			_, err := feedback.NewTwilio(tc.cfg, &recordingStore{})
			require.ErrorContains(t, err, tc.want)
		}
	})
}

// TestParseTwilio classifies status callbacks and incoming messages shaped
// as Twilio's docs show them ("Track the message status of outbound
// messages", https://www.twilio.com/docs/messaging/guides/track-outbound-message-status,
// and "Receive and reply to incoming messages",
// https://www.twilio.com/docs/messaging/tutorials/how-to-receive-and-reply).
func TestParseTwilio(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, body string) feedback.Report {
		t.Helper()
		params, err := url.ParseQuery(body)
		require.NoError(t, err)
		reports, err := feedback.ParseTwilio(params)
		require.NoError(t, err)
		require.Len(t, reports, 1)
		requireValid(t, reports)
		return reports[0]
	}

	t.Run("Samples", func(t *testing.T) {
		t.Parallel()
		delivered := parse(t, string(sample(t, "twilio", "status_delivered.txt")))
		require.Equal(t, feedback.ClassDelivered, delivered.Class)
		require.Equal(t, "SM1342fe1b2c904d1ab04f0fc7a58abca9:delivered", delivered.EventID)

		stop := parse(t, string(sample(t, "twilio", "inbound_stop.txt")))
		require.Equal(t, feedback.Report{
			Provider: feedback.ProviderTwilio, EventID: "SM2a1c8e6cb1a0f62e5b2e4b0a4c7b7b1f", Type: "received",
			Class: feedback.ClassUnsubscribe, Channel: feedback.ChannelSMS, Address: "+15558675310",
			Code: feedback.CodeUnsubscribe,
		}, stop)
	})

	t.Run("ErrorCodes", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			status, code string
			class        feedback.Class
			reason       string
		}{
			{"undelivered", "30003", feedback.ClassTransient, "twilio.30003"},
			{"undelivered", "30005", feedback.ClassPermanent, "twilio.30005"},
			{"undelivered", "30006", feedback.ClassPermanent, "twilio.30006"},
			{"undelivered", "30007", feedback.ClassOurSide, "twilio.30007"},
			{"failed", "30007", feedback.ClassOurSide, "twilio.30007"},
			{"undelivered", "30004", feedback.ClassTransient, "twilio.30004"},
			{"failed", "21610", feedback.ClassUnsubscribe, "twilio.21610"},
			{"failed", "30034", feedback.ClassOurSide, "twilio.30034"},
			{"undelivered", "30099", feedback.ClassTransient, "twilio.30099"},
			{"undelivered", "", feedback.ClassTransient, feedback.CodeBounceTransient},
			{"failed", "not-a-code", feedback.ClassOurSide, feedback.CodeSendFailed},
			{"delivered", "", feedback.ClassDelivered, feedback.CodeDelivered},
			{"read", "", feedback.ClassDelivered, feedback.CodeEngaged},
			{"sent", "", feedback.ClassNone, feedback.CodeIgnored},
			{"queued", "0", feedback.ClassNone, feedback.CodeIgnored},
		} {
			r := parse(t, "MessageSid=SM1&To=%2B15558675310&MessageStatus="+tc.status+"&ErrorCode="+tc.code)
			require.Equal(t, tc.class, r.Class, "%s %s", tc.status, tc.code)
			require.Equal(t, tc.reason, r.Code, "%s %s", tc.status, tc.code)
		}
	})

	t.Run("Keywords", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			body, optOutType string
			class            feedback.Class
		}{
			{"STOP", "", feedback.ClassUnsubscribe},
			{" stop\n", "", feedback.ClassUnsubscribe},
			{"Unsubscribe", "", feedback.ClassUnsubscribe},
			{"REVOKE", "", feedback.ClassUnsubscribe},
			{"OPTOUT", "", feedback.ClassUnsubscribe},
			{"STOP PLEASE", "", feedback.ClassNone},
			{"start", "", feedback.ClassResubscribe},
			{"UNSTOP", "", feedback.ClassResubscribe},
			{"yes", "", feedback.ClassResubscribe},
			{"HELP", "", feedback.ClassNone},
			{"arrête", "STOP", feedback.ClassUnsubscribe},
			{"STOP", "HELP", feedback.ClassNone},
			{"Hello there", "", feedback.ClassNone},
		} {
			q := url.Values{"MessageSid": {"SM9"}, "From": {"+15558675310"}, "Body": {tc.body}, "SmsStatus": {"received"}}
			if tc.optOutType != "" {
				q.Set("OptOutType", tc.optOutType)
			}
			r := parse(t, q.Encode())
			require.Equal(t, tc.class, r.Class, "%q %q", tc.body, tc.optOutType)
			require.Equal(t, "+15558675310", r.Address)
			require.Empty(t, r.MessageID)
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{"", "MessageStatus=delivered", "MessageSid=SM1", "CallSid=CA1&CallStatus=completed"} {
			params, err := url.ParseQuery(body)
			require.NoError(t, err)
			_, err = feedback.ParseTwilio(params)
			require.ErrorIs(t, err, feedback.ErrPayload, "%s", body)
		}
	})
}
