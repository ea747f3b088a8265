package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/webhook"
)

// The test vector the Standard Webhooks specification's libraries share
// (standard-webhooks/standard-webhooks, libraries/go/webhook_test.go
// TestWebhookSign, and the same values in every other language).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeader() http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorID)
	h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(webhook.HeaderSignature, vectorSignature)
	return h
}

func TestStandardWebhooksVector(t *testing.T) {
	t.Parallel()

	t.Run("Sign", func(t *testing.T) {
		t.Parallel()
		got, err := webhook.Sign([]string{vectorSecret}, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
		require.NoError(t, err)
		require.Equal(t, vectorSignature, got)
	})

	t.Run("Verify", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(vectorTimestamp, 0)
		require.NoError(t, webhook.Verify([]string{vectorSecret}, vectorHeader(), []byte(vectorBody), at, 0))
		require.NoError(t, webhook.Verify([]string{vectorSecret}, vectorHeader(), []byte(vectorBody), at.Add(5*time.Minute), 0))
		require.ErrorIs(t, webhook.Verify([]string{vectorSecret}, vectorHeader(), []byte(vectorBody), time.Now(), 0),
			webhook.ErrTimestamp, "a message from 2021 is too old today")
		require.ErrorIs(t, webhook.Verify([]string{vectorSecret}, vectorHeader(), []byte(`{"test": 2432232315}`), at, 0),
			webhook.ErrSignature)
	})
}

// refSign is an independent HMAC-SHA256 signature, as the specification
// describes it, for messages Sign refuses to make.
func refSign(t testing.TB, secret, id, timestamp string, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, webhook.SecretPrefix))
	require.NoError(t, err)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id + "." + timestamp + "."))
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// verifyCase is one table case of TestVerify, also a seed of FuzzVerify.
type verifyCase struct {
	name      string
	id        string
	timestamp string // the header
	signature string // the header; "" leaves it out
	body      string
	now       int64         // the receiver's clock, unix seconds
	tolerance time.Duration // 0: the default
	err       error         // nil: verifies
}

// verifyCases builds the table around a message signed with secretA at
// t0.
func verifyCases(t testing.TB) []verifyCase {
	const t0 = 1_750_000_000
	id := "0190f5d2-7c1e-7b3a-9f0e-2d4c5b6a7e81"
	body := `{"id":"0190f5d2-7c1e-7b3a-9f0e-2d4c5b6a7e81","type":"invoice.paid","data":{}}`
	ts := strconv.Itoa(t0)
	good, err := webhook.Sign([]string{secretA}, id, time.Unix(t0, 0), []byte(body))
	require.NoError(t, err)
	other, err := webhook.Sign([]string{secretB}, id, time.Unix(t0, 0), []byte(body))
	require.NoError(t, err)
	goodB64 := strings.TrimPrefix(good, "v1,")
	min5 := int64(5 * 60)

	return []verifyCase{
		{name: "Valid", id: id, timestamp: ts, signature: good, body: body, now: t0},
		{name: "AtTheOldEdge", id: id, timestamp: ts, signature: good, body: body, now: t0 + min5},
		{name: "AtTheFutureEdge", id: id, timestamp: ts, signature: good, body: body, now: t0 - min5},
		{name: "TooOld", id: id, timestamp: ts, signature: good, body: body, now: t0 + min5 + 1, err: webhook.ErrTimestamp},
		{name: "TooNew", id: id, timestamp: ts, signature: good, body: body, now: t0 - min5 - 1, err: webhook.ErrTimestamp},
		{name: "TooOldForACustomTolerance", id: id, timestamp: ts, signature: good, body: body, now: t0 + 61,
			tolerance: time.Minute, err: webhook.ErrTimestamp},
		{name: "TooNewForACustomTolerance", id: id, timestamp: ts, signature: good, body: body, now: t0 - 61,
			tolerance: time.Minute, err: webhook.ErrTimestamp},
		{name: "WithinACustomTolerance", id: id, timestamp: ts, signature: good, body: body, now: t0 + 3600,
			tolerance: 2 * time.Hour},
		{name: "NegativeToleranceIsTheDefault", id: id, timestamp: ts, signature: good, body: body, now: t0 + min5 + 1,
			tolerance: -time.Hour, err: webhook.ErrTimestamp},
		{name: "TamperedBody", id: id, timestamp: ts, signature: good, body: body + " ", now: t0, err: webhook.ErrSignature},
		{name: "EmptyBody", id: id, timestamp: ts, signature: good, body: "", now: t0, err: webhook.ErrSignature},
		{name: "TamperedID", id: id + "0", timestamp: ts, signature: good, body: body, now: t0, err: webhook.ErrSignature},
		{name: "TamperedTimestamp", id: id, timestamp: strconv.Itoa(t0 + 1), signature: good, body: body, now: t0,
			err: webhook.ErrSignature},
		{name: "OtherSecret", id: id, timestamp: ts, signature: other, body: body, now: t0, err: webhook.ErrSignature},
		{name: "RotationEitherMatches", id: id, timestamp: ts, signature: other + " " + good, body: body, now: t0},
		{name: "UnknownVersionsAndSpaces", id: id, timestamp: ts, body: body, now: t0,
			signature: "  v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==   v2," +
				goodB64 + "\tv1,bm90IGl0 junk , v1, " + good + "  "},
		{name: "RightMACUnderAnotherVersion", id: id, timestamp: ts, signature: "v2," + goodB64 + " v1a," + goodB64,
			body: body, now: t0, err: webhook.ErrSignature},
		{name: "NoVersion", id: id, timestamp: ts, signature: goodB64, body: body, now: t0, err: webhook.ErrSignature},
		{name: "UpperCaseVersion", id: id, timestamp: ts, signature: "V1," + goodB64, body: body, now: t0, err: webhook.ErrSignature},
		{name: "TruncatedSignature", id: id, timestamp: ts, signature: good[:len(good)-2], body: body, now: t0,
			err: webhook.ErrSignature},
		{name: "DotInID", id: "msg.1", timestamp: ts, signature: refSign(t, secretA, "msg.1", ts, []byte(body)),
			body: body, now: t0, err: webhook.ErrSignature},
		{name: "MissingID", timestamp: ts, signature: good, body: body, now: t0, err: webhook.ErrMissingHeaders},
		{name: "MissingTimestamp", id: id, signature: good, body: body, now: t0, err: webhook.ErrMissingHeaders},
		{name: "MissingSignature", id: id, timestamp: ts, body: body, now: t0, err: webhook.ErrMissingHeaders},
		{name: "BlankSignature", id: id, timestamp: ts, signature: "   ", body: body, now: t0, err: webhook.ErrMissingHeaders},
		{name: "TimestampNotANumber", id: id, timestamp: "yesterday", signature: good, body: body, now: t0,
			err: webhook.ErrTimestamp},
		{name: "TimestampSigned", id: id, timestamp: "+" + ts, signature: good, body: body, now: t0, err: webhook.ErrTimestamp},
		{name: "TimestampNegative", id: id, timestamp: "-1", signature: good, body: body, now: 0, err: webhook.ErrTimestamp},
		{name: "TimestampInMilliseconds", id: id, timestamp: ts + "000", signature: good, body: body, now: t0,
			err: webhook.ErrTimestamp},
		{name: "TimestampOverflows", id: id, timestamp: "99999999999999999999", signature: good, body: body, now: t0,
			err: webhook.ErrTimestamp},
		{name: "TimestampMaxInt64", id: id, timestamp: "9223372036854775807", signature: good, body: body, now: t0,
			err: webhook.ErrTimestamp},
		{name: "TimestampFraction", id: id, timestamp: ts + ".5", signature: good, body: body, now: t0, err: webhook.ErrTimestamp},
	}
}

func (c verifyCase) header() http.Header {
	h := http.Header{}
	if c.id != "" {
		h.Set(webhook.HeaderID, c.id)
	}
	if c.timestamp != "" {
		h.Set(webhook.HeaderTimestamp, c.timestamp)
	}
	if c.signature != "" {
		h.Set(webhook.HeaderSignature, c.signature)
	}
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()

	for _, tc := range verifyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := webhook.Verify([]string{secretA}, tc.header(), []byte(tc.body), time.Unix(tc.now, 0), tc.tolerance)
			if tc.err == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.NotContains(t, err.Error(), secretA[len(webhook.SecretPrefix):])
			for entry := range strings.FieldsSeq(tc.signature) {
				if len(entry) > 8 {
					require.NotContains(t, err.Error(), entry, "a signature is never quoted")
				}
			}
		})
	}

	t.Run("RepeatedSignatureHeader", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(vectorTimestamp, 0)
		h := vectorHeader()
		h.Del(webhook.HeaderSignature)
		h.Add(webhook.HeaderSignature, "v1,bm90IHRoaXMgb25l")
		h.Add(webhook.HeaderSignature, vectorSignature)
		require.NoError(t, webhook.Verify([]string{vectorSecret}, h, []byte(vectorBody), at, 0))
	})

	t.Run("LowerCaseHeaderMap", func(t *testing.T) {
		t.Parallel()
		h := http.Header{
			"webhook-id":        {vectorID},
			"webhook-timestamp": {strconv.Itoa(vectorTimestamp)},
			"webhook-signature": {vectorSignature},
		}
		require.NoError(t, webhook.Verify([]string{vectorSecret}, h, []byte(vectorBody), time.Unix(vectorTimestamp, 0), 0))
	})

	t.Run("SeveralSecrets", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(vectorTimestamp, 0)
		require.NoError(t, webhook.Verify([]string{secretA, vectorSecret}, vectorHeader(), []byte(vectorBody), at, 0))
		require.ErrorIs(t, webhook.Verify([]string{secretA, secretB}, vectorHeader(), []byte(vectorBody), at, 0),
			webhook.ErrSignature)
	})

	t.Run("InvalidSecrets", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(vectorTimestamp, 0)
		for name, secrets := range map[string][]string{
			"None":        nil,
			"NoPrefix":    {strings.TrimPrefix(vectorSecret, webhook.SecretPrefix)},
			"NotBase64":   {webhook.SecretPrefix + "MfKQ9r8GKYqrTwjUPD8ILPZIo2La!aSw"},
			"TooShort":    {testSecret("twenty-three bytes long")},
			"TooLong":     {testSecret(strings.Repeat("k", 65))},
			"OneOfTwoBad": {vectorSecret, webhook.SecretPrefix},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				err := webhook.Verify(secrets, vectorHeader(), []byte(vectorBody), at, 0)
				require.ErrorIs(t, err, webhook.ErrInvalidSecret)
				for _, s := range secrets {
					if key := strings.TrimPrefix(s, webhook.SecretPrefix); len(key) > 8 {
						require.NotContains(t, err.Error(), key[:8], "a secret is never quoted")
					}
				}
			})
		}
	})
}

func TestSign(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)

	t.Run("OneSignaturePerSecretInOrder", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(1_750_000_000, 0)
		both, err := webhook.Sign([]string{secretB, secretA}, "msg_1", at, body)
		require.NoError(t, err)
		a, err := webhook.Sign([]string{secretA}, "msg_1", at, body)
		require.NoError(t, err)
		b, err := webhook.Sign([]string{secretB}, "msg_1", at, body)
		require.NoError(t, err)
		require.Equal(t, b+" "+a, both)
		require.Equal(t, refSign(t, secretA, "msg_1", "1750000000", body), a)
	})

	t.Run("SubSecondsAreDropped", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(1_750_000_000, 999_999_999)
		got, err := webhook.Sign([]string{secretA}, "msg_1", at, body)
		require.NoError(t, err)
		require.Equal(t, refSign(t, secretA, "msg_1", "1750000000", body), got)
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(1_750_000_000, 0)
		_, err := webhook.Sign([]string{secretA}, "", at, body)
		require.ErrorIs(t, err, webhook.ErrMissingHeaders)
		_, err = webhook.Sign([]string{secretA}, "msg.1", at, body)
		require.ErrorIs(t, err, webhook.ErrSignature)
		_, err = webhook.Sign([]string{secretA}, "msg_1", time.Unix(-1, 0), body)
		require.ErrorIs(t, err, webhook.ErrTimestamp)
		_, err = webhook.Sign(nil, "msg_1", at, body)
		require.ErrorIs(t, err, webhook.ErrInvalidSecret)
	})
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := webhook.NewSecret(), webhook.NewSecret()
	require.NotEqual(t, a, b)
	for _, s := range []string{a, b} {
		require.True(t, strings.HasPrefix(s, webhook.SecretPrefix), s)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, webhook.SecretPrefix))
		require.NoError(t, err)
		require.Len(t, key, 32)
	}
	_, err := webhook.New(&webhook.Config{Secrets: []string{a, b}})
	require.NoError(t, err)
	at := time.Now()
	sig, err := webhook.Sign([]string{a}, "msg_1", at, []byte("{}"))
	require.NoError(t, err)
	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_1")
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(webhook.HeaderSignature, sig)
	require.NoError(t, webhook.Verify([]string{b, a}, h, []byte("{}"), at, 0))
}
