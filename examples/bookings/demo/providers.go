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

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/google/uuid"

	"github.com/tidings-go/tidings/examples/bookings/internal/service"
	"github.com/tidings-go/tidings/notification/feedback"
)

// The demo's stand-ins for the providers, on loopback: Resend's SMTP
// relay, and HTTP servers that speak the Expo push API (receipts
// included) and the Twilio Messages API. Each is as strict as its
// provider about who calls it (SMTP AUTH, Twilio's basic auth, Expo's
// bearer token), records what it received, and reports back to the
// service as its provider does: Resend and Twilio post signed webhooks to
// the receivers the service mounts. A call its provider would refuse, or
// a mail without the idempotency key Resend drops repeats by, halts the
// demo with what was wrong.
type providers struct {
	halt     func(error) // stops the story, with the cause
	mu       sync.Mutex
	mails    []string          // "to: subject"
	emailIDs map[string]string // the last email id answered per recipient
	mailKeys map[string]string // the Resend-Idempotency-Key of each email id
	pushes   []string          // tickets
	tokens   map[string]string // the push token of each ticket
	texts    []string          // "to"
	bodies   map[string]string // of each text, by its sid
	// callbacks are the StatusCallback parameters of the texts.
	callbacks []string
	smtp      *smtp.Server
	smtpDone  chan struct{}
	smtpAddr  string
	expo      *httptest.Server
	twilio    *httptest.Server
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

// The demo's SMTP credentials, as Resend's: the user "resend" and an API
// key.
const (
	smtpUser     = "resend"
	smtpPassword = "re_demo_api_key"
)

// expoToken is the demo's Expo access token, which its Expo stand-in
// requires as a project with enhanced push security does.
const expoToken = "demo-expo-access-token"

// noApp is the push token of a device the app was removed from: Expo
// accepts pushes to it, and its receipts say DeviceNotRegistered.
const noApp = "ExponentPushToken[grace-device]"

// invalidNumber is the number Twilio's test credentials reject with error
// 21211 ("invalid 'To' phone number"): the demo's dead notification.
const invalidNumber = "+15005550001"

// startProviders starts the stand-ins; each calls halt with what was
// wrong when it refuses a call.
func startProviders(halt func(error)) (*providers, error) {
	p := &providers{halt: halt, smtpDone: make(chan struct{}), emailIDs: map[string]string{}, mailKeys: map[string]string{},
		tokens: map[string]string{}, bodies: map[string]string{}}
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
	expo.Handle("POST /--/api/v2/push/send", p.expoAuth(p.expoPush))
	expo.Handle("POST /--/api/v2/push/getReceipts", p.expoAuth(p.expoReceipts))
	p.expo = httptest.NewServer(expo)
	twilio := http.NewServeMux()
	twilio.HandleFunc("POST /2010-04-01/Accounts/"+twilioSID+"/Messages.json", p.twilioMessage)
	twilio.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p.refuse("twilio stand-in: %s %s is not the demo account's Messages resource", r.Method, r.URL.Path)
		twilioError(w, http.StatusNotFound, 20404, "The requested resource "+r.URL.Path+" was not found")
	})
	p.twilio = httptest.NewServer(twilio)
	return p, nil
}

// refuse halts the demo: a stand-in was called as its provider would
// refuse, or without what the service must send.
func (p *providers) refuse(format string, args ...any) {
	p.halt(fmt.Errorf(format, args...))
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

// smtpSession is one SMTP session of the stand-in, which requires AUTH
// PLAIN with the demo's credentials before a message.
type smtpSession struct {
	p      *providers
	authed bool
	to     string
}

var _ smtp.AuthSession = (*smtpSession)(nil)

// AuthMechanisms offers PLAIN, as Resend's relay does.
func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

// Auth accepts the demo's credentials only.
func (s *smtpSession) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != smtpUser || password != smtpPassword {
			s.p.refuse("smtp stand-in: AUTH PLAIN as %q without the demo's password", username)
			return smtp.ErrAuthFailed
		}
		s.authed = true
		return nil
	}), nil
}

// Mail refuses a sender that did not sign in.
func (s *smtpSession) Mail(string, *smtp.MailOptions) error {
	if !s.authed {
		s.p.refuse("smtp stand-in: MAIL FROM without AUTH")
		return smtp.ErrAuthRequired
	}
	return nil
}
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
	key := msg.Header.Get(service.MailIdempotencyHeader)
	if key == "" {
		s.p.refuse("smtp stand-in: a message to %s without a %s header", s.to, service.MailIdempotencyHeader)
	}
	id := uuid.NewString()
	s.p.mu.Lock()
	s.p.mails = append(s.p.mails, s.to+": "+subject)
	s.p.emailIDs[s.to] = id
	s.p.mailKeys[id] = key
	s.p.mu.Unlock()
	return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: "OK: queued as " + id}
}
func (s *smtpSession) Reset()        {}
func (s *smtpSession) Logout() error { return nil }

// expoAuth answers 401, as Expo does, a call without the demo's access
// token, and passes the others to next.
func (p *providers) expoAuth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+expoToken {
			p.refuse("expo stand-in: %s without the demo's access token", r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"The bearer token is invalid."}]}`)
			return
		}
		next(w, r)
	})
}

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

// twilioMessage answers POST /2010-04-01/Accounts/{sid}/Messages.json of
// the demo's account as Twilio does: 401 with error 20003 without the
// account's credentials, 400 with error 21211 for invalidNumber.
func (p *providers) twilioMessage(w http.ResponseWriter, r *http.Request) {
	if sid, token, ok := r.BasicAuth(); !ok || sid != twilioSID || token != twilioToken {
		p.refuse("twilio stand-in: a call without the demo account's credentials")
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	to := r.PostFormValue("To")
	if to == invalidNumber {
		twilioError(w, http.StatusBadRequest, 21211, "The 'To' number "+to+" is not a valid phone number.")
		return
	}
	p.mu.Lock()
	p.texts = append(p.texts, to)
	sid := fmt.Sprintf("SM%032d", len(p.texts))
	p.bodies[sid] = r.PostFormValue("Body")
	p.callbacks = append(p.callbacks, r.PostFormValue("StatusCallback"))
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"sid": sid, "status": "queued"})
}

// twilioError answers as Twilio's REST API does when it refuses a call.
func twilioError(w http.ResponseWriter, status, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": message,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code), "status": status})
}

// textBody returns the body of the text Twilio answered with sid.
func (p *providers) textBody(sid string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	body, ok := p.bodies[sid]
	return body, ok
}

// sent returns the Resend-Idempotency-Key of each mail, by its email id,
// and the StatusCallback of each text.
func (p *providers) sent() (mailKeys map[string]string, callbacks []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.mailKeys), slices.Clone(p.callbacks)
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
