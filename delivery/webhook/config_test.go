package webhook_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/webhook"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for name, cfg := range map[string]*webhook.Config{
			"Minimal":         {Secrets: []string{secretA}},
			"Rotation":        {Secrets: []string{secretA, secretB}},
			"ShortestKey":     {Secrets: []string{testSecret(strings.Repeat("k", webhook.SecretBytesMin))}},
			"LongestKey":      {Secrets: []string{testSecret(strings.Repeat("k", webhook.SecretBytesMax))}},
			"StandardVector":  {Secrets: []string{vectorSecret}},
			"EveryField":      {Secrets: []string{secretA}, Timeout: time.Second, HTTPClient: &http.Client{}, AllowInsecure: true, UserAgent: "acme/1.0 (+https://acme.example)"},
			"PaddedBase64Key": {Secrets: []string{testSecret(strings.Repeat("k", 25))}},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				hook, err := webhook.New(cfg)
				require.NoError(t, err)
				require.NotNil(t, hook)
			})
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name      string
			cfg       *webhook.Config
			want      []string // in the error's text
			badSecret bool     // the error wraps ErrInvalidSecret
		}{
			{name: "NilConfig", cfg: nil, want: []string{"Config.Secrets is required"}, badSecret: true},
			{name: "NoSecrets", cfg: &webhook.Config{}, want: []string{"Config.Secrets is empty"}, badSecret: true},
			{name: "NoPrefix", cfg: &webhook.Config{Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
				want: []string{"Config.Secrets[0] does not start with whsec_"}, badSecret: true},
			{name: "NotBase64", cfg: &webhook.Config{Secrets: []string{secretA, "whsec_MfKQ9r8GKYqrTwjUPD8I-PZIo2La_aSw"}},
				want: []string{"Config.Secrets[1] is not whsec_ followed by standard base64"}, badSecret: true},
			{name: "Empty", cfg: &webhook.Config{Secrets: []string{""}},
				want: []string{"Config.Secrets[0] does not start with whsec_"}, badSecret: true},
			{name: "PrefixOnly", cfg: &webhook.Config{Secrets: []string{"whsec_"}},
				want: []string{"Config.Secrets[0] has a key of 0 bytes, not 24 to 64"}, badSecret: true},
			{name: "TooShort", cfg: &webhook.Config{Secrets: []string{testSecret(strings.Repeat("k", 23))}},
				want: []string{"Config.Secrets[0] has a key of 23 bytes"}, badSecret: true},
			{name: "TooLong", cfg: &webhook.Config{Secrets: []string{testSecret(strings.Repeat("k", 65))}},
				want: []string{"Config.Secrets[0] has a key of 65 bytes"}, badSecret: true},
			{name: "NegativeTimeout", cfg: &webhook.Config{Secrets: []string{secretA}, Timeout: -time.Second},
				want: []string{"Config.Timeout is negative: -1s"}},
			{name: "UserAgentWithNewline", cfg: &webhook.Config{Secrets: []string{secretA}, UserAgent: "a\r\nX-Evil: 1"},
				want: []string{"Config.UserAgent is not printable ASCII"}},
			{name: "EveryProblem", cfg: &webhook.Config{Secrets: []string{"plain", secretA, "whsec_abc"}, Timeout: -1, UserAgent: "é"},
				want: []string{"Config.Secrets[0]", "Config.Secrets[2]", "Config.Timeout", "Config.UserAgent"}, badSecret: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				hook, err := webhook.New(tc.cfg)
				require.Error(t, err)
				require.Nil(t, hook)
				for _, w := range tc.want {
					require.Contains(t, err.Error(), w)
				}
				require.True(t, strings.HasPrefix(err.Error(), "webhook: "), err.Error())
				if tc.badSecret {
					require.ErrorIs(t, err, webhook.ErrInvalidSecret)
				} else {
					require.NotErrorIs(t, err, webhook.ErrInvalidSecret)
				}
				if tc.cfg != nil {
					for _, s := range tc.cfg.Secrets {
						if key := strings.TrimPrefix(s, webhook.SecretPrefix); len(key) > 4 {
							require.NotContains(t, err.Error(), key, "a secret is never quoted")
						}
					}
				}
			})
		}
	})
}
