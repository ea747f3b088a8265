package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1" // Twilio's scheme is HMAC-SHA1.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/tidings-go/tidings/notification/feedback"
)

// The demo's stand-ins for the providers, on loopback: Resend's SMTP
// relay, and HTTP servers that speak the Expo push API (receipts
// included) and the Twilio Messages API. Each records what it received,
// and reports back to the service as its provider does: Resend and Twilio
// post signed webhooks to the receivers the service mounts.
type providers struct {
	mu       sync.Mutex
	mails    []string          // "to: subject"
	emailIDs map[string]string // the last email id answered per recipient
	pushes   []string          // tickets
	tokens   map[string]string // the push token of each ticket
	texts    []string          // "to"
	bodies   []string          // of the texts
	smtp     *smtp.Server
	smtpDone chan struct{}
	smtpAddr string
	expo     *httptest.Server
	twilio   *httptest.Server
	// service is the base URL of the service, whose receivers the
	// webhooks post to.
	service string
}

// The secrets the demo's providers sign their webhooks with, which the
// service is configured with: Resend's webhook signing secret, and
// Twilio's auth token.
var resendSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("the demo's Resend signing secret"))

// The demo's Twilio account: its SID, auth token and sender, the number
// Twilio's test credentials send from.
const (
	twilioSID   = "AC00000000000000000000000000000000"
	twilioToken = "demo-token"
	twilioFrom  = "+15005550006"
)

// noApp is the push token of a device the app was removed from: Expo
// accepts pushes to it, and its receipts say DeviceNotRegistered.
const noApp = "ExponentPushToken[grace-device]"

// invalidNumber is the number Twilio's test credentials reject with error
// 21211 ("invalid 'To' phone number"): the demo's dead notification.
const invalidNumber = "+15005550001"

func startProviders() (*providers, error) {
	p := &providers{smtpDone: make(chan struct{}), emailIDs: map[string]string{}, tokens: map[string]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.smtpAddr = ln.Addr().String()
	p.smtp = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{p: p}, nil }))
	p.smtp.Domain = "mx.demo"
	p.smtp.AllowInsecureAuth = true
	p.smtp.ErrorLog = log.New(io.Discard, "", 0)
	go func() {
		defer close(p.smtpDone)
		_ = p.smtp.Serve(ln)
	}()

	expo := http.NewServeMux()
	expo.HandleFunc("POST /--/api/v2/push/send", p.expoPush)
	expo.HandleFunc("POST /--/api/v2/push/getReceipts", p.expoReceipts)
	p.expo = httptest.NewServer(expo)
	p.twilio = httptest.NewServer(http.HandlerFunc(p.twilioMessage))
	return p, nil
}

func (p *providers) close() {
	p.expo.Close()
	p.twilio.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.smtp.Shutdown(ctx); err != nil {
		_ = p.smtp.Close()
	}
	<-p.smtpDone
}

type smtpSession struct {
	p  *providers
	to string
}

func (s *smtpSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = to
	return nil
}

// Data accepts the message and answers with the email id a later webhook
// names it by, as "queued as <id>": the reference the mail delivery
// keeps. (go-smtp answers a nil error with a fixed text; an SMTPError
// with a 250 code is how a session says more.)
func (s *smtpSession) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	subject, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	id := uuid.NewString()
	s.p.mu.Lock()
	s.p.mails = append(s.p.mails, s.to+": "+subject)
	s.p.emailIDs[s.to] = id
	s.p.mu.Unlock()
	return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "OK: queued as " + id}
}
func (s *smtpSession) Reset()        {}
func (s *smtpSession) Logout() error { return nil }

// expoPush answers POST /--/api/v2/push/send as Expo does: a ticket per
// message.
func (p *providers) expoPush(w http.ResponseWriter, r *http.Request) {
	var msgs []struct {
		To string `json:"to"`
	}
	if json.NewDecoder(r.Body).Decode(&msgs) != nil {
		http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR","message":"bad request"}]}`, http.StatusBadRequest)
		return
	}
	type ticket struct {
		Status string `json:"status"`
		ID     string `json:"id"`
	}
	var data []ticket
	p.mu.Lock()
	for _, m := range msgs {
		id := fmt.Sprintf("ticket-%d", len(p.pushes)+1)
		p.pushes = append(p.pushes, id)
		p.tokens[id] = m.To
		data = append(data, ticket{"ok", id})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// expoReceipts answers POST /--/api/v2/push/getReceipts as Expo does: a
// receipt per ticket it issued, DeviceNotRegistered for a push to noApp.
func (p *providers) expoReceipts(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"ids"`
	}
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR","message":"bad request"}]}`, http.StatusBadRequest)
		return
	}
	data := map[string]any{}
	p.mu.Lock()
	for _, id := range req.IDs {
		switch token, ok := p.tokens[id]; {
		case !ok:
		case token == noApp:
			data[id] = map[string]any{"status": "error", "message": strconv.Quote(token) + " is not a registered push notification recipient",
				"details": map[string]string{"error": "DeviceNotRegistered", "expoPushToken": token}}
		default:
			data[id] = map[string]string{"status": "ok"}
		}
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// twilioMessage answers POST /2010-04-01/Accounts/{sid}/Messages.json as
// Twilio does, rejecting invalidNumber with error 21211.
func (p *providers) twilioMessage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	to := r.PostFormValue("To")
	if to == invalidNumber {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"code": 21211, "message": "The 'To' number `+to+` is not a valid phone number.", "more_info": "https://www.twilio.com/docs/errors/21211", "status": 400}`)
		return
	}
	p.mu.Lock()
	p.texts = append(p.texts, to)
	p.bodies = append(p.bodies, r.PostFormValue("Body"))
	sid := fmt.Sprintf("SM%032d", len(p.texts))
	p.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"sid": sid, "status": "queued"})
}

// lastText returns the body of the last text received.
func (p *providers) lastText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) == 0 {
		return ""
	}
	return p.bodies[len(p.bodies)-1]
}

func (p *providers) received() (mails, pushes, texts []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.mails...), append([]string(nil), p.pushes...), append([]string(nil), p.texts...)
}

// bounce reports, as Resend does, that the last mail to address bounced
// for good: an email.bounced event for its email id, signed with Svix,
// posted to the service's /feedback/resend. It returns the email id and
// the receiver's status code.
func (p *providers) bounce(ctx context.Context, address string) (emailID string, status int, err error) {
	p.mu.Lock()
	emailID = p.emailIDs[address]
	p.mu.Unlock()
	if emailID == "" {
		return "", 0, fmt.Errorf("no mail to %s to bounce", address)
	}
	now := time.Now().UTC()
	body, err := json.Marshal(map[string]any{
		"type": "email.bounced", "created_at": now.Format(time.RFC3339Nano),
		"data": map[string]any{
			"email_id": emailID, "created_at": now.Format(time.RFC3339Nano),
			"from": "Parking <no-reply@parking.example>", "to": []string{address},
			"bounce": map[string]string{"type": "Permanent", "subType": "General",
				"message": "The recipient's mail server permanently rejected the email."},
		},
	})
	if err != nil {
		return "", 0, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(resendSecret, "whsec_"))
	if err != nil {
		return "", 0, err
	}
	id, ts := "msg_"+randomHex(12), strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	header := http.Header{"Content-Type": {"application/json"}, feedback.SvixIDHeader: {id}, feedback.SvixTimestampHeader: {ts},
		feedback.SvixSignatureHeader: {"v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	status, err = post(ctx, p.service+"/feedback/resend", header, body)
	return emailID, status, err
}

// textIn posts, as Twilio does, an incoming text from a number to the
// service's sender to the number's messaging webhook, the service's
// /feedback/twilio, signed with X-Twilio-Signature: HMAC-SHA1 with the
// auth token over the URL and the sorted parameters. It returns the
// receiver's status code.
func (p *providers) textIn(ctx context.Context, from, body string) (int, error) {
	sid := "SM" + randomHex(16)
	form := url.Values{"MessageSid": {sid}, "SmsMessageSid": {sid}, "SmsSid": {sid}, "SmsStatus": {"received"},
		"AccountSid": {twilioSID}, "From": {from}, "To": {twilioFrom}, "Body": {body},
		"NumMedia": {"0"}, "NumSegments": {"1"}, "ApiVersion": {"2010-04-01"}}
	webhook := p.service + "/feedback/twilio"
	signed := webhook
	for _, k := range slices.Sorted(maps.Keys(form)) {
		signed += k + form.Get(k)
	}
	mac := hmac.New(sha1.New, []byte(twilioToken))
	mac.Write([]byte(signed))
	header := http.Header{"Content-Type": {"application/x-www-form-urlencoded"},
		feedback.TwilioSignatureHeader: {base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	return post(ctx, webhook, header, []byte(form.Encode()))
}

// post posts body to a receiver and returns its status code: an error
// unless it is 2xx, which is the receiver's word that it committed.
func post(ctx context.Context, to string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp.StatusCode, fmt.Errorf("POST %s: %s: %s", to, resp.Status, bytes.TrimSpace(msg))
	}
	return resp.StatusCode, nil
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
