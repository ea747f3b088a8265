package notification

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds staged payloads to the dispatcher's decoder: it never
// panics, every rejection has a reason that quotes no value, and what it
// accepts has a channel and a recipient.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"channel":"mail","recipient":"a@example.com","template":"t","data":{"n":1}}`,
		`{"channel":"mail"}`, // no recipient
		`{"channel":7}`,      // wrong type
		`{"channel":"mail","recipient":"x","data":[1]}`,
		`null`,
		`"just a string"`,
		`{"channel":"mail","recipient":"x","data":{"deep":{"deeper":[{},{}]}}}`,
		`{`, // truncated
		"{\"channel\":\"mail\",\"recipient\":\"\u00e9\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decode(body)
		if err != nil {
			require.NotEmpty(t, err.Error())
			if len(body) > 8 {
				require.NotContains(t, err.Error(), string(body), "a reason never quotes the payload")
			}
			return
		}
		require.NotEmpty(t, p.Channel)
		require.NotEmpty(t, p.Recipient)
	})
}

// FuzzRequestRoundTrip stages arbitrary requests: whatever Message
// accepts, the dispatcher decodes back to the same request.
func FuzzRequestRoundTrip(f *testing.F) {
	f.Add("mail", "a@example.com", "welcome", "name", "Ada")
	f.Add("sms", "+15550100", "", "", "")
	f.Add("push", "ExponentPushToken[x]", "t", "k\u0000", "\xff") // invalid UTF-8 and NUL in data
	f.Fuzz(func(t *testing.T, channel, recipient, template, key, value string) {
		req := Request{Channel: channel, Recipient: recipient, Template: template}
		if key != "" {
			req.Data = map[string]any{key: value}
		}
		msg, err := req.Message("m")
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidRequest)
			return
		}
		require.True(t, json.Valid(msg.Payload))
		p, err := decode(msg.Payload)
		require.NoError(t, err)
		// encoding/json replaces invalid UTF-8: compare with what a JSON
		// round trip of the same strings gives.
		want := payload{Channel: channel, Recipient: recipient, Template: template, Data: req.Data}
		wantJSON, err := json.Marshal(want)
		require.NoError(t, err)
		var wantBack payload
		require.NoError(t, json.Unmarshal(wantJSON, &wantBack))
		require.Equal(t, wantBack, p)
	})
}

// A type mismatch names the field and the kind of value, never the value:
// a number too big for a float64 would otherwise be quoted whole.
func TestDecodeNeverQuotesAValue(t *testing.T) {
	t.Parallel()
	_, err := decode([]byte(`{"channel":"sms","recipient":"x","data":{"account":4915739120001e400}}`))
	require.ErrorContains(t, err, `is a JSON number, want float64`)
	require.NotContains(t, err.Error(), "4915739120001")
}
