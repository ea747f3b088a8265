package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// The demo's stand-ins for the providers, on loopback: an SMTP server, and
// HTTP servers that speak the Expo push API and the Twilio Messages API.
// Each records what it received.
type providers struct {
	mu       sync.Mutex
	mails    []string // "to: subject"
	pushes   []string // tickets
	texts    []string // "to"
	bodies   []string // of the texts
	smtp     *smtp.Server
	smtpDone chan struct{}
	smtpAddr string
	expo     *httptest.Server
	twilio   *httptest.Server
}

// invalidNumber is the number Twilio's test credentials reject with error
// 21211 ("invalid 'To' phone number"): the demo's dead notification.
const invalidNumber = "+15005550001"

func startProviders() (*providers, error) {
	p := &providers{smtpDone: make(chan struct{})}
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

	p.expo = httptest.NewServer(http.HandlerFunc(p.expoPush))
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
func (s *smtpSession) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	subject, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	s.p.mu.Lock()
	s.p.mails = append(s.p.mails, s.to+": "+subject)
	s.p.mu.Unlock()
	return nil
}
func (s *smtpSession) Reset()        {}
func (s *smtpSession) Logout() error { return nil }

// expoPush answers POST /--/api/v2/push/send as Expo does: a ticket per
// message.
func (p *providers) expoPush(w http.ResponseWriter, r *http.Request) {
	var msgs []struct {
		To string `json:"to"`
	}
	if r.URL.Path != "/--/api/v2/push/send" || json.NewDecoder(r.Body).Decode(&msgs) != nil {
		http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR","message":"bad request"}]}`, http.StatusBadRequest)
		return
	}
	type ticket struct {
		Status string `json:"status"`
		ID     string `json:"id"`
	}
	var data []ticket
	p.mu.Lock()
	for range msgs {
		id := fmt.Sprintf("ticket-%d", len(p.pushes)+1)
		p.pushes = append(p.pushes, id)
		data = append(data, ticket{"ok", id})
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
