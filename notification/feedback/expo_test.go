package feedback_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/notification/feedback"
)

// expoDocAnswer is the getReceipts answer of Expo's "Push receipt
// response format"
// (https://docs.expo.dev/push-notifications/sending-notifications/#push-receipt-response-format).
const expoDocAnswer = `{
  "data": {
    "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX": { "status": "ok" },
    "ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ": {
      "status": "error",
      "message": "The Apple Push Notification service failed to send the notification",
      "details": {
        "error": "DeviceNotRegistered"
      }
    }
  }
}`

// expoServer plays Expo's getReceipts endpoint: it answers each request
// with answer(ids) and records the requests.
type expoServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  [][]string
	tokens []string
}

func newExpoServer(t *testing.T, answer func(w http.ResponseWriter, ids []string)) *expoServer {
	t.Helper()
	s := &expoServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/--/api/v2/push/getReceipts" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"errors":[{"code":"NOT_FOUND","message":"no"}]}`, http.StatusNotFound)
			return
		}
		var req struct {
			IDs []string `json:"ids"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.IDs) > feedback.ExpoIDsMax {
			http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR","message":"bad ids"}]}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.calls = append(s.calls, req.IDs)
		s.tokens = append(s.tokens, r.Header.Get("Authorization"))
		s.mu.Unlock()
		answer(w, req.IDs)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *expoServer) Calls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.calls...)
}

func newExpo(t *testing.T, s *expoServer, token string) *feedback.Expo {
	t.Helper()
	e, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: s.srv.URL, AccessToken: token, HTTPClient: s.srv.Client()})
	require.NoError(t, err)
	return e
}

func TestExpoReceipts(t *testing.T) {
	t.Parallel()

	t.Run("DocAnswer", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, _ []string) { _, _ = w.Write([]byte(expoDocAnswer)) })
		reports, err := newExpo(t, s, "expo-access-token").Receipts(t.Context(), []string{
			"ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ", "not-ready-yet", "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX",
		})
		require.NoError(t, err)
		requireValid(t, reports)
		require.Equal(t, []feedback.Report{{
			Provider: feedback.ProviderExpo, EventID: "ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ", Type: "error",
			Class: feedback.ClassPermanent, Channel: feedback.ChannelPush,
			MessageID: "ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ", Code: "expo.device_not_registered",
		}, {
			Provider: feedback.ProviderExpo, EventID: "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX", Type: "ok",
			Class: feedback.ClassDelivered, Channel: feedback.ChannelPush,
			MessageID: "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX", Code: feedback.CodeDelivered,
		}}, reports)
		require.Equal(t, []string{"Bearer expo-access-token"}, s.tokens)
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, _ []string) {
			_, _ = w.Write([]byte(`{"data":{
				"a":{"status":"error","message":"too big","details":{"error":"MessageTooBig"}},
				"b":{"status":"error","details":{"error":"MessageRateExceeded"}},
				"c":{"status":"error","details":{"error":"InvalidCredentials"}},
				"d":{"status":"error","details":{"error":"DeviceNotRegistered","expoPushToken":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"}},
				"e":{"status":"error","message":"something"},
				"f":{"status":"error","details":{"error":"Weird code with spaces!"}}}}`))
		})
		reports, err := newExpo(t, s, "").Receipts(t.Context(), []string{"a", "b", "c", "d", "e", "f"})
		require.NoError(t, err)
		requireValid(t, reports)
		var got []string
		for _, r := range reports {
			got = append(got, string(r.Class)+" "+r.Code)
		}
		require.Equal(t, []string{
			"our_side expo.message_too_big",
			"our_side expo.message_rate_exceeded",
			"our_side expo.invalid_credentials",
			"permanent expo.device_not_registered",
			"our_side expo.error",
			"our_side expo.error",
		}, got)
		require.Equal(t, "ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]", reports[3].Address)
		require.Equal(t, []string{""}, s.tokens, "no token, no Authorization")
	})

	// What Expo's answer holds that PostgreSQL cannot store is replaced,
	// as in every report: a NUL, as JSON's \u0000, would fail the staging
	// of every report of the channel's receipts, on every hand.
	t.Run("StorableTexts", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, _ []string) {
			_, _ = w.Write([]byte(`{"data":{"a":{"status":"error","details":{"error":"DeviceNotRegistered",
				"expoPushToken":"ExponentPushToken[a\u0000b]"}},"b":{"status":"o\u0000k"}}}`))
		})
		reports, err := newExpo(t, s, "").Receipts(t.Context(), []string{"a", "b"})
		require.NoError(t, err)
		requireValid(t, reports)
		require.Equal(t, "ExponentPushToken[a\uFFFDb]", reports[0].Address)
		require.Equal(t, "o\uFFFDk", reports[1].Type)
	})

	t.Run("AThousandAtATime", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, ids []string) {
			data := map[string]any{}
			for _, id := range ids {
				data[id] = map[string]string{"status": "ok"}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
		})
		ids := make([]string, 2500)
		for i := range ids {
			ids[i] = "ticket-" + strconv.Itoa(i)
		}
		reports, err := newExpo(t, s, "").Receipts(t.Context(), ids)
		require.NoError(t, err)
		require.Len(t, reports, 2500)
		for i, r := range reports {
			require.Equal(t, ids[i], r.EventID)
		}
		var sizes []int
		for _, c := range s.Calls() {
			sizes = append(sizes, len(c))
		}
		require.Equal(t, []int{1000, 1000, 500}, sizes)
	})

	t.Run("HTTPErrors", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			status     int
			body       string
			retryAfter string
			retryable  bool
			code       string
			wait       time.Duration
		}{
			{http.StatusTooManyRequests, `{"errors":[{"code":"TOO_MANY_REQUESTS","message":"slow down"}]}`, "30", true, "TOO_MANY_REQUESTS", 30 * time.Second},
			{http.StatusServiceUnavailable, `upstream down`, "", true, "", 0},
			{http.StatusBadRequest, `{"errors":[{"code":"VALIDATION_ERROR","message":"token ExponentPushToken[x] is bad"}]}`, "", false, "VALIDATION_ERROR", 0},
			{http.StatusUnauthorized, `{"errors":[{"code":"UNAUTHORIZED","message":"bad token"}]}`, "", false, "UNAUTHORIZED", 0},
			{http.StatusOK, `not json`, "", false, "", 0},
		} {
			t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
				t.Parallel()
				s := newExpoServer(t, func(w http.ResponseWriter, _ []string) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.body))
				})
				reports, err := newExpo(t, s, "secret-token-3e9").Receipts(t.Context(), []string{"a"})
				require.Empty(t, reports)
				xe, ok := errors.AsType[*feedback.ExpoError](err)
				require.True(t, ok, "%v", err)
				require.Equal(t, tc.status, xe.StatusCode)
				require.Equal(t, tc.code, xe.Code)
				require.Equal(t, tc.wait, xe.RetryAfter)
				require.Equal(t, tc.retryable, feedback.Retryable(err))
				require.NotContains(t, err.Error(), "secret-token-3e9")
				require.NotContains(t, err.Error(), "ExponentPushToken")
			})
		}
	})

	t.Run("KeepsTheReportsBeforeAFailure", func(t *testing.T) {
		t.Parallel()
		var n int
		var mu sync.Mutex
		s := newExpoServer(t, func(w http.ResponseWriter, ids []string) {
			mu.Lock()
			n++
			first := n == 1
			mu.Unlock()
			if !first {
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			_, _ = fmt.Fprintf(w, `{"data":{%q:{"status":"ok"}}}`, ids[0])
		})
		ids := make([]string, 1001)
		for i := range ids {
			ids[i] = "t" + strconv.Itoa(i)
		}
		reports, err := newExpo(t, s, "").Receipts(t.Context(), ids)
		require.True(t, feedback.Retryable(err))
		require.Len(t, reports, 1)
		require.Equal(t, "t0", reports[0].EventID)
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		e, err := feedback.NewExpo(&feedback.ExpoConfig{BaseURL: srv.URL})
		require.NoError(t, err)
		_, err = e.Receipts(t.Context(), []string{"a"})
		require.Error(t, err)
		require.True(t, feedback.Retryable(err), "%v", err)
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, _ []string) { _, _ = w.Write([]byte(expoDocAnswer)) })
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := newExpo(t, s, "").Receipts(ctx, []string{"a"})
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, feedback.Retryable(err))
		require.Empty(t, s.Calls())
	})

	t.Run("EmptyID", func(t *testing.T) {
		t.Parallel()
		s := newExpoServer(t, func(w http.ResponseWriter, _ []string) { _, _ = w.Write([]byte(expoDocAnswer)) })
		_, err := newExpo(t, s, "").Receipts(t.Context(), []string{"a", " "})
		require.ErrorContains(t, err, "ticket id 1 is empty")
		require.Empty(t, s.Calls())
		reports, err := newExpo(t, s, "").Receipts(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, reports)
	})

	t.Run("Config", func(t *testing.T) {
		t.Parallel()
		_, err := feedback.NewExpo(nil)
		require.NoError(t, err)
		for _, tc := range []struct {
			cfg  feedback.ExpoConfig
			want string
		}{
			{feedback.ExpoConfig{BaseURL: "exp.host"}, "BaseURL is not an absolute"},
			{feedback.ExpoConfig{BaseURL: "https://exp.host/?a=1"}, "BaseURL is not an absolute"},
			{feedback.ExpoConfig{AccessToken: "with space"}, "AccessToken contains"},
			{feedback.ExpoConfig{Timeout: -time.Second}, "Timeout is negative"},
		} {
			_, err := feedback.NewExpo(&tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "with space")
		}
	})
}
