package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/console"
	"github.com/tidings-go/tidings/notification/feedback"
)

// The suppressions page lists suppressed addresses masked, by channel;
// with addresses shown, each row lifts, through a guarded POST whose
// redirect names no address; read-only, nothing lifts.
func TestSuppressionsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const mail, phone = "zelda.quintessa@example.com", "+14155550100"
	for _, s := range []notification.Suppression{
		{Channel: "mail", Address: mail, Class: feedback.ClassPermanent, Reason: feedback.CodeBouncePermanent, Provider: "resend",
			Source: "msg_0001"},
		{Channel: "sms", Address: phone, Scope: "marketing"},
	} {
		require.NoError(t, b.client.Suppress(t.Context(), b.db, s))
	}

	masked := b.serve(t, nil)
	page := html.UnescapeString(masked.get(t, "/suppressions", http.StatusOK))
	require.Contains(t, page, "z***@example.com")
	require.Contains(t, page, "+1415*****00")
	require.Contains(t, page, "bounce.permanent")
	require.Contains(t, page, "marketing")
	require.NotContains(t, page, "zelda.quintessa")
	require.NotContains(t, page, "5550100")
	require.NotContains(t, page, `action="/suppressions/lift"`, "a masked row cannot be lifted here")
	require.Contains(t, page, "tidings lift")
	sms := masked.get(t, "/suppressions?channel=sms", http.StatusOK)
	require.Contains(t, sms, "marketing")
	require.NotContains(t, sms, "bounce.permanent", "only the channel asked for")
	require.Contains(t, masked.crawl(t), "/suppressions", "the navigation links it")

	shown := b.serve(t, &console.Options{ShowRecipients: true})
	page = html.UnescapeString(shown.get(t, "/suppressions", http.StatusOK))
	require.Contains(t, page, mail)
	token := shown.token(t, "/suppressions")
	lift := func(form url.Values) *http.Response {
		form.Set("csrf", token)
		return shown.post(t, "/suppressions/lift", form, nil)
	}
	resp := lift(url.Values{"channel": {"mail"}, "address": {mail}, "scope": {""}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	where := resp.Header.Get("Location")
	require.Equal(t, "/suppressions?channel=mail&lifted=yes", where)
	require.Contains(t, shown.get(t, where, http.StatusOK), "Lifted the suppression")
	left, err := b.client.Suppressions(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "sms", left[0].Channel)

	resp = lift(url.Values{"channel": {"sms"}, "address": {phone}, "scope": {""}})
	require.Equal(t, "/suppressions?channel=sms&lifted=no", resp.Header.Get("Location"), "suppressed in marketing only")
	resp = lift(url.Values{"channel": {"Mail!"}, "address": {mail}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = shown.post(t, "/suppressions/lift", url.Values{"channel": {"sms"}, "address": {phone}, "scope": {"marketing"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no token, no lift")

	readOnly := b.serve(t, &console.Options{ShowRecipients: true, ReadOnly: true})
	page = html.UnescapeString(readOnly.get(t, "/suppressions", http.StatusOK))
	require.Contains(t, page, phone)
	require.NotContains(t, page, `method="post"`)
	resp = readOnly.post(t, "/suppressions/lift", url.Values{"csrf": {token}, "channel": {"sms"}, "address": {phone},
		"scope": {"marketing"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	left, err = b.client.Suppressions(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, left, 1, "nothing lifted read-only")

	// A row's lift lifts its scope alone: the number's suppression for
	// every category stays.
	require.NoError(t, b.client.Suppress(t.Context(), b.db, notification.Suppression{Channel: "sms", Address: phone,
		Class: feedback.ClassPermanent, Reason: "twilio.30005"}))
	resp = lift(url.Values{"channel": {"sms"}, "address": {phone}, "scope": {"marketing"}})
	require.Equal(t, "/suppressions?channel=sms&lifted=yes", resp.Header.Get("Location"))
	left, err = b.client.Suppressions(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Empty(t, left[0].Scope, "the suppression for every category is left")
}

// A page holds SuppressionsLimitMax rows at most; it says how to reach the
// others, and asks for a channel only when none is chosen.
func TestSuppressionsPageFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	for i := range notification.SuppressionsLimitMax + 1 {
		s := notification.Suppression{Channel: "mail", Address: fmt.Sprintf("u%05d@example.com", i)}
		require.NoError(t, b.client.Suppress(t.Context(), tx, s))
	}
	require.NoError(t, tx.Commit())

	s := b.serve(t, nil)
	page := html.UnescapeString(s.get(t, "/suppressions?channel=mail", http.StatusOK))
	require.Contains(t, page, "The first 1000 only.")
	require.NotContains(t, page, "choose a channel", "one is chosen")
	require.Contains(t, page, "tidings suppressions --channel mail --show-addresses --after ROW")
	page = html.UnescapeString(s.get(t, "/suppressions", http.StatusOK))
	require.Contains(t, page, "The first 1000 only: choose a channel to see others.")
}
