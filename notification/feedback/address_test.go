package feedback_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// A mail address is the mailbox the mail module sends to, whatever way
// the request or the report writes it: a display name, a comment, case.
func TestNormalizeAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ channel, in, want string }{
		{feedback.ChannelMail, " Jane@Example.com ", "jane@example.com"},
		{feedback.ChannelMail, "Jane <Jane@Example.com>", "jane@example.com"},
		{feedback.ChannelMail, "jane@example.com (Jane)", "jane@example.com"},
		{feedback.ChannelMail, "real@example.com (x <other@example.net>)", "real@example.com"},
		{feedback.ChannelMail, `"Jane Doe" <JANE@example.com>`, "jane@example.com"},
		{feedback.ChannelMail, "no address <Jane@Example.com", "no address <jane@example.com"}, // unreadable: kept, lower-cased
		{feedback.ChannelSMS, " +14155550100 ", "+14155550100"},
		{feedback.ChannelPush, "ExponentPushToken[Ab]", "ExponentPushToken[Ab]"},
	} {
		require.Equal(t, tc.want, feedback.NormalizeAddress(tc.channel, tc.in), "%s %q", tc.channel, tc.in)
	}
}
