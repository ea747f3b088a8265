package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
)

// The names of the anti-forgery cookie and form field.
const (
	cookieName = "tidings_console"
	fieldName  = "csrf"
)

// formMaxBytes bounds the body of a POST: a form of a page of ids.
const formMaxBytes = 64 << 10

// guard protects the forms against cross-site forgery, twice: the
// browser's own word on where a request comes from
// (http.CrossOriginProtection), and a double-submit token. The cookie
// holds a random value; the form holds its HMAC under the guard's key, so
// a site that can plant a cookie (a sibling subdomain) still cannot make
// a form that matches it.
type guard struct {
	key     []byte
	origins *http.CrossOriginProtection
	path    string // of the cookie
}

func newGuard(o Options) (*guard, error) {
	g := &guard{key: o.Secret, origins: http.NewCrossOriginProtection(), path: o.BasePath}
	switch {
	case o.Secret == nil:
		g.key = make([]byte, SecretMinLen)
		_, _ = rand.Read(g.key) // never fails
	case len(o.Secret) < SecretMinLen:
		return nil, fmt.Errorf("%w: Secret is %d bytes, want at least %d", ErrOptions, len(o.Secret), SecretMinLen)
	}
	if g.path == "" {
		g.path = "/"
	}
	for i, origin := range o.TrustedOrigins {
		if err := g.origins.AddTrustedOrigin(origin); err != nil {
			return nil, fmt.Errorf("%w: TrustedOrigins[%d]: %w", ErrOptions, i, err)
		}
	}
	return g, nil
}

// sign is the form token of the cookie value v.
func (g *guard) sign(v []byte) []byte {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte("tidings console form\x00"))
	m.Write(v)
	return m.Sum(nil)
}

// cookie returns the decoded value of the request's cookie, or nil.
func cookie(r *http.Request) []byte {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	v, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(v) != 32 {
		return nil
	}
	return v
}

// token returns the form token of the request's cookie, setting a new
// cookie first when the request has none.
func (g *guard) token(w http.ResponseWriter, r *http.Request) string {
	v := cookie(r)
	if v == nil {
		v = make([]byte, 32)
		_, _ = rand.Read(v) // never fails
		http.SetCookie(w, &http.Cookie{
			Name: cookieName, Value: base64.RawURLEncoding.EncodeToString(v), Path: g.path,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
	}
	return base64.RawURLEncoding.EncodeToString(g.sign(v))
}

// errForged is what check answers a request that fails it.
var errForged = errors.New("console: the form's token does not match its cookie")

// check parses the form of r and reports why it must be refused: it comes
// from another site, or its token does not match its cookie.
func (g *guard) check(w http.ResponseWriter, r *http.Request) error {
	if err := g.origins.Check(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, formMaxBytes)
	if err := r.ParseForm(); err != nil {
		return err
	}
	v := cookie(r)
	got, err := base64.RawURLEncoding.DecodeString(r.PostForm.Get(fieldName))
	if v == nil || err != nil || !hmac.Equal(g.sign(v), got) {
		return errForged
	}
	return nil
}

// guarded runs next for a POST that passes the guard, and refuses any
// other with 403.
func (h *handler) guarded(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h.guard.check(w, r); err != nil {
			h.opts.Logger.WarnContext(r.Context(), "refused a POST", "path", r.URL.Path, "err", err)
			h.fail(w, r, http.StatusForbidden,
				"This change was refused: it came from another site, or its form is stale. Reload the page and try again.")
			return
		}
		if name, bad := notText(r.PostForm); bad {
			h.fail(w, r, http.StatusBadRequest, notTextMessage(name))
			return
		}
		next(w, r)
	}
}
