package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/tidings-go/tidings/delivery"
	"github.com/tidings-go/tidings/delivery/webhook"
)

// A receiver's endpoint: verify the signature against the body as
// received, deduplicate on webhook-id, answer 2xx fast.
func ExampleVerify() {
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} // from configuration, never from code

	var (
		mu   sync.Mutex
		seen = map[string]bool{} // in production: a table with a unique key on the id
	)
	receive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		if err := webhook.Verify(secrets, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, "invalid webhook", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(webhook.HeaderID)
		mu.Lock()
		duplicate := seen[id]
		seen[id] = true
		mu.Unlock()
		if duplicate {
			w.WriteHeader(http.StatusNoContent) // processed already: accept, do nothing
			return
		}
		var event struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		fmt.Println("processing", event.Type, event.Data["invoice"]) // or queue it, and answer at once
		w.WriteHeader(http.StatusNoContent)
	})

	body := []byte(`{"id":"msg_1","type":"invoice.paid","timestamp":"2025-07-01T09:30:00Z","data":{"invoice":"INV-17"}}`)
	for _, req := range []*http.Request{
		signedRequest(secrets[0], "msg_1", body),         // the first delivery
		signedRequest(secrets[0], "msg_1", body),         // sent again after a crash: same id
		tamper(signedRequest(secrets[0], "msg_2", body)), // changed on the way
	} {
		rec := httptest.NewRecorder()
		receive.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// processing invoice.paid INV-17
	// 204
	// 204
	// 401
}

// signedRequest is a request as Deliver sends it, signed now.
func signedRequest(secret, id string, body []byte) *http.Request {
	now := time.Now()
	signature, err := webhook.Sign([]string{secret}, id, now, body)
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, signature)
	return req
}

// tamper replaces req's body with another.
func tamper(req *http.Request) *http.Request {
	req.Body = io.NopCloser(bytes.NewReader([]byte(`{"type":"invoice.paid","data":{"invoice":"INV-99"}}`)))
	return req
}

// A Delivery posts a request to the URL its recipient names. Here the
// endpoint is a local test server (http is allowed on loopback).
func ExampleDelivery_Deliver() {
	secret := webhook.NewSecret() // give it to the receiver too
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]string{secret}, r.Header, body, time.Now(), 0); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer endpoint.Close()

	hook, err := webhook.New(&webhook.Config{Secrets: []string{secret}})
	if err != nil {
		panic(err)
	}
	outcome := hook.Deliver(context.Background(), delivery.Pending{
		ID:        uuid.Must(uuid.NewV7()),
		Channel:   "webhook",
		Recipient: endpoint.URL + "/hooks/acme",
		Template:  "invoice.paid",
		Data:      map[string]any{"invoice": "INV-17"},
		Attempt:   1,
		StagedAt:  time.Now(),
	})
	fmt.Println(outcome)

	outcome = hook.Deliver(context.Background(), delivery.Pending{
		ID:        uuid.Must(uuid.NewV7()),
		Channel:   "webhook",
		Recipient: "http://hooks.example.com/acme?token=s3cret",
		Attempt:   1,
	})
	fmt.Println(outcome)
	// Output:
	// delivered
	// reject: webhook: recipient is not an https URL: it is http on a host that is not loopback, and Config.AllowInsecure is false
}
