package feedback_test

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidings-go/tidings/notification/feedback"
)

// The fuzz targets assert what every parser promises: it never panics;
// it returns reports or an error wrapping ErrPayload, never both kinds of
// nothing; every report has a provider, an event id, a valid class, a
// channel and a code; a Detail holds no address or number a person could
// be found by; a mail Address is lower case; a report survives a JSON
// round trip; and parsing the same input twice gives the same reports.
// Their seeds are the provider's samples (in testdata/fuzz, with the
// edge cases the tables do not cover).

// detailChars is what a Detail may hold.
var detailChars = regexp.MustCompile(`^[A-Za-z0-9 ._-]*$`)

// checkParsed checks the promises of a parser's answer.
func checkParsed(t *testing.T, reports []feedback.Report, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, feedback.ErrPayload) {
			t.Fatalf("an error that is not ErrPayload: %v", err)
		}
		if reports != nil {
			t.Fatalf("reports with an error")
		}
		return
	}
	if len(reports) == 0 {
		return
	}
	for _, r := range reports {
		if r.Provider == "" || r.EventID == "" || !r.Class.Valid() || r.Channel == "" || r.Code == "" {
			t.Fatalf("an incomplete report: %+v", r)
		}
		if !detailChars.MatchString(r.Detail) || strings.Contains(r.Detail, "@") {
			t.Fatalf("a Detail with other characters: %q", r.Detail)
		}
		if r.Channel == feedback.ChannelMail && r.Address != strings.ToLower(r.Address) {
			t.Fatalf("a mail address not lower-cased: %q", r.Address)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var back feedback.Report
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		// JSON keeps valid UTF-8 only; compare what it can carry.
		if back.OccurredAt.Equal(r.OccurredAt) {
			back.OccurredAt = r.OccurredAt
		}
		if string(mustJSON(t, back)) != string(b) {
			t.Fatalf("JSON round trip changed the report: %s", b)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkStable parses twice and requires the same reports.
func checkStable(t *testing.T, parse func() ([]feedback.Report, error)) {
	t.Helper()
	a, errA := parse()
	b, errB := parse()
	checkParsed(t, a, errA)
	if (errA == nil) != (errB == nil) || string(mustJSON(t, a)) != string(mustJSON(t, b)) {
		t.Fatalf("two parses differ")
	}
}

func FuzzParseResend(f *testing.F) {
	f.Add("msg_1", []byte(`{"type":"email.bounced","data":{"to":["A@B.c","d@e.f"],"bounce":{"type":"Transient","subType":"MailboxFull"}}}`))
	f.Add("msg_1", []byte(`{"type":"email.delivered","data":{"to":"Jane <Jane@Example.com>"}}`))
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		checkStable(t, func() ([]feedback.Report, error) { return feedback.ParseResend(id, body) })
	})
}

func FuzzParsePostmark(f *testing.F) {
	f.Add([]byte(`{"RecordType":"Bounce","ID":"12","Type":"SoftBounce","Inactive":true}`))
	f.Add([]byte(`{"RecordType":"Bounce","ID":99999999999999999999999}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkStable(t, func() ([]feedback.Report, error) { return feedback.ParsePostmark(body) })
	})
}

func FuzzParseSES(f *testing.F) {
	f.Add("sns-1", []byte(`{"eventType":"DeliveryDelay","deliveryDelay":{"delayedRecipients":[{"emailAddress":"A@b.c"}]}}`))
	f.Add("sns-1", []byte(`{"notificationType":"Bounce","bounce":{"bouncedRecipients":[{"emailAddress":"a@b.c","status":"5.1.1"},{"emailAddress":"d@e.f","status":"jane@x"}]}}`))
	f.Fuzz(func(t *testing.T, id string, message []byte) {
		if id == "" {
			id = "sns-1" // the receiver never parses without the SNS MessageId
		}
		checkStable(t, func() ([]feedback.Report, error) { return feedback.ParseSES(id, message) })
	})
}

// FuzzSNSMessage checks that any body either is refused as unverifiable
// or gives a string to sign that ends with its Type.
func FuzzSNSMessage(f *testing.F) {
	f.Add([]byte(`{"Type":"Notification","MessageId":"m","TopicArn":"t","Timestamp":"x","Signature":"s","SigningCertURL":"u","Subject":null}`))
	f.Add([]byte(`{"Type":"SubscriptionConfirmation","MessageId":"m","TopicArn":"t","Timestamp":"x","Signature":"s","SigningCertURL":"u"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := feedback.SNSStringToSign(body)
		if err != nil {
			if !errors.Is(err, feedback.ErrSignature) {
				t.Fatalf("an error that is not ErrSignature: %v", err)
			}
			return
		}
		if !strings.HasPrefix(s, "Message\n") || !regexp.MustCompile(`\nType\n[A-Za-z]+\n$`).MatchString(s) {
			t.Fatalf("a string to sign out of shape: %q", s)
		}
	})
}

func FuzzParseSendGrid(f *testing.F) {
	f.Add([]byte(`[{"event":"bounce","type":"blocked","email":"A@b.c","timestamp":1e300}]`))
	f.Add([]byte(`[{"event":"group_unsubscribe","asm_group_id":"7","sg_message_id":".filter"}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkStable(t, func() ([]feedback.Report, error) { return feedback.ParseSendGrid(body) })
	})
}

func FuzzParseTwilio(f *testing.F) {
	f.Add("MessageSid=SM1&MessageStatus=undelivered&ErrorCode=30005&To=%2B1555")
	f.Add("MessageSid=SM1&Body=%20stop%20&OptOutType=start&From=%2B1555")
	f.Fuzz(func(t *testing.T, body string) {
		params, err := url.ParseQuery(body)
		if err != nil {
			return // the receiver refuses such a body before parsing it
		}
		checkStable(t, func() ([]feedback.Report, error) { return feedback.ParseTwilio(params) })
	})
}

func FuzzExpoReceipts(f *testing.F) {
	f.Add([]byte(expoDocAnswer), "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX ZZZZZZZZ-ZZZZ-ZZZZ-ZZZZ-ZZZZZZZZZZZZ")
	f.Add([]byte(`{"data":{"a":{"status":"error","details":{"error":"ABC_def"}}}}`), "a")
	f.Fuzz(func(t *testing.T, answer []byte, ids string) {
		var valid []string
		for _, id := range strings.Fields(ids) {
			if utf8.ValidString(id) && len(id) <= feedback.EventIDMax && !strings.ContainsFunc(id, unicode.IsControl) {
				valid = append(valid, id) // Receipts refuses the others
			}
		}
		reports, err := feedback.ExpoReports(answer, valid)
		if err != nil {
			return // Receipts answers an *ExpoError
		}
		checkParsed(t, reports, nil)
		for _, r := range reports {
			if r.Class == feedback.ClassPermanent && r.Code != "expo.device_not_registered" {
				t.Fatalf("a permanent class for %s", r.Code)
			}
			if !regexp.MustCompile(`^(delivered|expo\.[a-z_]+)$`).MatchString(r.Code) {
				t.Fatalf("a code out of shape: %q", r.Code)
			}
		}
	})
}

// FuzzSvix checks that the Svix verification never panics, answers nil or
// one of its sentinels, accepts what is signed with a configured secret
// and refuses it once the body changes.
func FuzzSvix(f *testing.F) {
	f.Add(svixDocID, svixDocTimestamp, svixDocSignature, []byte(svixDocBody), int64(1614265330))
	f.Add("", "", "", []byte(nil), int64(0))
	f.Add("msg_1", "00001", "v1, v1,,v2,x v1,AAAA", []byte("{}"), int64(1))
	f.Add("a.b", "9223372036854775807", strings.Repeat("v1,x ", 64), []byte("\x00\xff"), int64(-1))
	key := []byte("tidings feedback fuzz secret key")
	f.Fuzz(func(t *testing.T, id, timestamp, signature string, body []byte, now int64) {
		h := http.Header{}
		h.Set(feedback.SvixIDHeader, id)
		h.Set(feedback.SvixTimestampHeader, timestamp)
		h.Set(feedback.SvixSignatureHeader, signature)
		clock := time.Unix(now, 0)
		_, err := feedback.VerifySvix([][]byte{key}, h, body, clock, 5*time.Minute)
		if err != nil && !errors.Is(err, feedback.ErrMissingHeader) && !errors.Is(err, feedback.ErrTimestamp) && !errors.Is(err, feedback.ErrSignature) {
			t.Fatalf("an error outside the sentinels: %v", err)
		}
		_ = feedback.ParseSvixSignatures(signature)

		if strings.TrimSpace(id) == "" || now < 0 || id != strings.TrimSpace(id) || strings.ContainsAny(id, "\r\n\x00") {
			return
		}
		ts := strconv.FormatInt(now, 10)
		sig := "v1," + base64.StdEncoding.EncodeToString(feedback.SvixSign(key, id, ts, body))
		h.Set(feedback.SvixTimestampHeader, ts)
		h.Set(feedback.SvixSignatureHeader, signature+" "+sig)
		if got, err := feedback.VerifySvix([][]byte{key}, h, body, clock, 5*time.Minute); err != nil || got != id {
			t.Fatalf("a signed request refused: %v", err)
		}
		if _, err := feedback.VerifySvix([][]byte{key}, h, append(body, 'x'), clock, 5*time.Minute); !errors.Is(err, feedback.ErrSignature) {
			t.Fatalf("a changed body = %v, want ErrSignature", err)
		}
	})
}

// FuzzSendGridSignature checks that any pair of headers is refused with a
// sentinel or accepted, without a panic, against SendGrid's own key.
func FuzzSendGridSignature(f *testing.F) {
	f.Add(sendgridVectorSignature, sendgridVectorTimestamp, []byte(sendgridVectorPayload))
	f.Add("MAA=", "1588788367", []byte("[]"))
	f.Add("", "-1", []byte(nil))
	key, err := feedback.ParseSendGridKey(sendgridVectorKey)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1588788367, 0)
	f.Fuzz(func(t *testing.T, signature, timestamp string, body []byte) {
		h := http.Header{}
		h.Set(feedback.SendGridSignatureHeader, signature)
		h.Set(feedback.SendGridTimestampHeader, timestamp)
		err := feedback.VerifySendGrid([]*ecdsa.PublicKey{key}, h, body, now, time.Hour)
		if err == nil {
			if timestamp != sendgridVectorTimestamp || string(body) != sendgridVectorPayload {
				t.Fatalf("accepted a request SendGrid did not sign")
			}
			return
		}
		if !errors.Is(err, feedback.ErrMissingHeader) && !errors.Is(err, feedback.ErrTimestamp) && !errors.Is(err, feedback.ErrSignature) {
			t.Fatalf("an error outside the sentinels: %v", err)
		}
	})
}

// FuzzTwilioSignature checks that the Twilio verification never panics
// and accepts exactly the worked example's signature for its parameters.
func FuzzTwilioSignature(f *testing.F) {
	f.Add(twilioDocSignature, twilioDocParams.Encode())
	f.Add("", "a=1&a=2&%zz")
	f.Add("AAAA", "=&&=;")
	f.Fuzz(func(t *testing.T, signature, body string) {
		h := http.Header{}
		h.Set(feedback.TwilioSignatureHeader, signature)
		params, err := feedback.VerifyTwilio([]string{twilioDocToken}, twilioDocURL, h, []byte(body))
		if err != nil {
			if !errors.Is(err, feedback.ErrMissingHeader) && !errors.Is(err, feedback.ErrSignature) {
				t.Fatalf("an error outside the sentinels: %v", err)
			}
			return
		}
		if params.Encode() != twilioDocParams.Encode() {
			t.Fatalf("accepted parameters Twilio did not sign: %s", body)
		}
	})
}
