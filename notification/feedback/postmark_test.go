package feedback_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// basicAuth is a header with basic-auth credentials.
func basicAuth(user, password string) http.Header {
	req, _ := http.NewRequest(http.MethodPost, "https://receiver.example/", nil)
	req.SetBasicAuth(user, password)
	return req.Header
}

func TestPostmarkReceiver(t *testing.T) {
	t.Parallel()
	body := sample(t, "postmark", "bounce.json")
	newHandler := func(store feedback.Store) http.Handler {
		h, err := feedback.NewPostmark(&feedback.PostmarkConfig{Credentials: []feedback.Credential{
			{Username: "postmark", Password: "old-password-2f1c"},
			{Username: "postmark", Password: "new-password-9d3e"},
		}}, store)
		require.NoError(t, err)
		return h
	}
	runHandlerCases(t, newHandler, []handlerCase{
		// Postmark asks for a 200 OK, not any 2xx.
		{name: "Credentials", header: basicAuth("postmark", "new-password-9d3e"), body: body, status: http.StatusOK, stored: true},
		{name: "RotatedCredentials", header: basicAuth("postmark", "old-password-2f1c"), body: body, status: http.StatusOK, stored: true},
		{name: "WrongPassword", header: basicAuth("postmark", "new-password-9d3f"), body: body, status: http.StatusUnauthorized, errText: feedback.ErrCredentials.Error()},
		{name: "WrongUser", header: basicAuth("postmarl", "new-password-9d3e"), body: body, status: http.StatusUnauthorized, errText: feedback.ErrCredentials.Error()},
		{name: "NoCredentials", body: body, status: http.StatusUnauthorized, errText: feedback.ErrCredentials.Error()},
		{name: "NotJSON", header: basicAuth("postmark", "new-password-9d3e"), body: []byte("<xml/>"), status: http.StatusBadRequest},
		{name: "StoreFails", header: basicAuth("postmark", "new-password-9d3e"), body: body, storeErr: errStoreDown, status: http.StatusServiceUnavailable, stored: true},
		{name: "Put", method: http.MethodPut, status: http.StatusMethodNotAllowed},
	})

	t.Run("AsksForCredentials", func(t *testing.T) {
		t.Parallel()
		rec := post(t, newHandler(&recordingStore{}), nil, body)
		require.Equal(t, http.StatusUnauthorized, rec.Code)
		require.Equal(t, `Basic realm="feedback"`, rec.Header().Get("WWW-Authenticate"))
		require.NotContains(t, rec.Body.String(), "password")
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		_, err := feedback.NewPostmark(nil, &recordingStore{})
		require.ErrorContains(t, err, "PostmarkConfig is nil")
		_, err = feedback.NewPostmark(&feedback.PostmarkConfig{}, &recordingStore{})
		require.ErrorContains(t, err, "Credentials is empty")
		_, err = feedback.NewPostmark(&feedback.PostmarkConfig{Credentials: []feedback.Credential{{Username: "u"}}}, &recordingStore{})
		require.ErrorContains(t, err, "Credentials[0] has an empty")
	})
}

// TestParsePostmark classifies Postmark's sample payloads: the examples of
// https://postmarkapp.com/developer/webhooks/bounce-webhook,
// https://postmarkapp.com/developer/webhooks/spam-complaint-webhook and
// https://postmarkapp.com/developer/webhooks/subscription-change-webhook.
func TestParsePostmark(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want feedback.Report
	}{
		{"bounce.json", feedback.Report{
			Provider: feedback.ProviderPostmark, EventID: "Bounce:4323372036854775807", Type: "Bounce",
			Class: feedback.ClassPermanent, Channel: feedback.ChannelMail, Address: "john@example.com",
			MessageID: "883953f4-6105-42a2-a16a-77a8eac79483", Code: feedback.CodeBouncePermanent,
			Detail: "HardBounce inactive can_activate", OccurredAt: time.Date(2019, 11, 5, 16, 33, 54, 907025900, time.UTC),
		}},
		{"spam_complaint.json", feedback.Report{
			Provider: feedback.ProviderPostmark, EventID: "SpamComplaint:42", Type: "SpamComplaint",
			Class: feedback.ClassComplaint, Channel: feedback.ChannelMail, Address: "john@example.com",
			MessageID: "00000000-0000-0000-0000-000000000000", Code: feedback.CodeComplaint,
			Detail: "SpamComplaint inactive", OccurredAt: time.Date(2019, 11, 5, 16, 33, 54, 907025900, time.UTC),
		}},
		{"subscription_change.json", feedback.Report{
			Provider: feedback.ProviderPostmark, EventID: "SubscriptionChange:", Type: "SubscriptionChange",
			Class: feedback.ClassPermanent, Channel: feedback.ChannelMail, Address: "bounced-address@wildbit.com",
			MessageID: "883953f4-6105-42a2-a16a-77a8eac79483", Code: feedback.CodeBouncePermanent,
			Detail: "HardBounce", OccurredAt: time.Date(2020, 2, 1, 10, 53, 34, 416071000, time.UTC),
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			reports, err := feedback.ParsePostmark(sample(t, "postmark", tc.file))
			require.NoError(t, err)
			require.Len(t, reports, 1)
			requireValid(t, reports)
			got := reports[0]
			if tc.want.EventID == "SubscriptionChange:" {
				require.Regexp(t, `^SubscriptionChange:[0-9a-f]{32}$`, got.EventID)
				require.NotContains(t, got.EventID, "wildbit")
				got.EventID = tc.want.EventID
			}
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("BounceTypes", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			typ      string
			inactive bool
			class    feedback.Class
		}{
			{"HardBounce", false, feedback.ClassPermanent},
			{"BadEmailAddress", false, feedback.ClassPermanent},
			{"SoftBounce", false, feedback.ClassTransient},
			{"Transient", false, feedback.ClassTransient},
			{"DnsError", false, feedback.ClassTransient},
			{"SoftBounce", true, feedback.ClassPermanent},
			{"SpamComplaint", true, feedback.ClassComplaint},
			{"Unsubscribe", false, feedback.ClassUnsubscribe},
			{"Subscribe", false, feedback.ClassNone},
			{"SpamNotification", false, feedback.ClassOurSide},
			{"VirusNotification", false, feedback.ClassOurSide},
			{"Blocked", true, feedback.ClassOurSide},
			{"DMARCPolicy", false, feedback.ClassOurSide},
			{"SMTPApiError", false, feedback.ClassOurSide},
			{"TemplateRenderingFailed", false, feedback.ClassOurSide},
			{"AutoResponder", false, feedback.ClassNone},
			{"ManuallyDeactivated", true, feedback.ClassNone},
			{"Unknown", false, feedback.ClassNone},
			{"SomethingNew", false, feedback.ClassNone},
		} {
			inactive := "false"
			if tc.inactive {
				inactive = "true"
			}
			body := `{"RecordType":"Bounce","ID":7,"Type":"` + tc.typ + `","Email":"Jane@Example.com","Inactive":` + inactive + `}`
			reports, err := feedback.ParsePostmark([]byte(body))
			require.NoError(t, err)
			require.Equal(t, tc.class, reports[0].Class, "%s inactive=%t", tc.typ, tc.inactive)
			require.Equal(t, "jane@example.com", reports[0].Address)
		}
	})

	t.Run("SubscriptionChanges", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			suppress bool
			reason   string
			class    feedback.Class
		}{
			{true, "HardBounce", feedback.ClassPermanent},
			{true, "SpamComplaint", feedback.ClassComplaint},
			{true, "ManualSuppression", feedback.ClassUnsubscribe},
			// A reactivation is the sender's, never the person's: it lifts
			// no unsubscribe of theirs.
			{false, "ManualSuppression", feedback.ClassNone},
			{false, "HardBounce", feedback.ClassNone},
		} {
			suppress := "false"
			if tc.suppress {
				suppress = "true"
			}
			body := `{"RecordType":"SubscriptionChange","MessageID":"m1","Recipient":"a@example.com","SuppressSending":` + suppress + `,"SuppressionReason":"` + tc.reason + `"}`
			reports, err := feedback.ParsePostmark([]byte(body))
			require.NoError(t, err)
			require.Equal(t, tc.class, reports[0].Class, "suppress=%t %s", tc.suppress, tc.reason)
		}
	})

	t.Run("Unparseable", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{``, `[]`, `{}`, `{"RecordType":"Bounce","Inactive":"yes"}`} {
			_, err := feedback.ParsePostmark([]byte(body))
			require.ErrorIs(t, err, feedback.ErrPayload, "%s", body)
		}
	})
}
