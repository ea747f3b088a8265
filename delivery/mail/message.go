package mail

import (
	"bytes"
	"fmt"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidings-go/tidings/delivery"
)

// lineMax is the longest line SMTP allows, without its CRLF (RFC 5321,
// section 4.5.3.1.6).
const lineMax = 998

// foldAt is the line length past which a header is folded, when it can
// be (RFC 5322, section 2.1.1).
const foldAt = 78

// rendered is a template rendered with one request's data.
type rendered struct {
	subject string
	text    string // "" when the template has no Text
	html    string // "" when the template has no HTML
	hasText bool
	hasHTML bool
}

// render executes the three parts of t with data. A nil data is no values.
// Its error is a *TemplateError.
func (t *parsedTemplate) render(data map[string]any) (rendered, error) {
	var r rendered
	var err error
	if r.subject, err = t.subject.Execute(data); err != nil {
		return rendered{}, prefixed(err)
	}
	if t.text != nil {
		if r.text, err = t.text.Execute(data); err != nil {
			return rendered{}, prefixed(err)
		}
		r.hasText = true
	}
	if t.html != nil {
		if r.html, err = t.html.Execute(data); err != nil {
			return rendered{}, prefixed(err)
		}
		r.hasHTML = true
	}
	return r, nil
}

// messageID is the Message-ID of request id: the same on every attempt.
func (s *settings) messageID(p delivery.Pending) string {
	return "<" + p.ID.String() + "@" + s.hostname + ">"
}

// compose builds the message for p, to to, from r: headers and a MIME body
// with CRLF line endings, ready for DATA (which adds the dot-stuffing).
func (s *settings) compose(p delivery.Pending, to *mail.Address, r rendered, now time.Time) ([]byte, error) {
	var buf bytes.Buffer
	var err error
	header := func(name, value string) {
		line := name + ": " + value
		if name == "Subject" {
			line = fold(line)
		}
		for l := range strings.SplitSeq(line, "\r\n") {
			if len(l) > lineMax && err == nil {
				err = fmt.Errorf("%w: %s", ErrHeaderTooLong, name)
			}
		}
		buf.WriteString(line)
		buf.WriteString("\r\n")
	}

	header("From", s.from.String())
	header("To", to.String())
	header("Subject", encodeSubject(r.subject))
	header("Date", now.Format(time.RFC1123Z))
	header("Message-ID", s.messageID(p))
	if s.idemHeader != "" {
		header(s.idemHeader, p.ID.String())
	}
	header("MIME-Version", "1.0")
	if err != nil {
		return nil, err
	}

	const (
		textType = "text/plain; charset=utf-8"
		htmlType = "text/html; charset=utf-8"
		qp       = "quoted-printable"
	)
	switch {
	case r.hasText && r.hasHTML:
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, part := range []struct{ contentType, content string }{
			{textType, r.text}, // the least preferred first (RFC 2046, 5.1.4)
			{htmlType, r.html},
		} {
			w, err := mw.CreatePart(textproto.MIMEHeader{
				"Content-Type":              {part.contentType},
				"Content-Transfer-Encoding": {qp},
			})
			if err != nil {
				return nil, err
			}
			if err := writeQP(w, part.content); err != nil {
				return nil, err
			}
		}
		if err := mw.Close(); err != nil {
			return nil, err
		}
		header("Content-Type", mime.FormatMediaType("multipart/alternative", map[string]string{"boundary": mw.Boundary()}))
		buf.WriteString("\r\n")
		buf.Write(body.Bytes())
	default:
		contentType, content := textType, r.text
		if !r.hasText {
			contentType, content = htmlType, r.html
		}
		header("Content-Type", contentType)
		header("Content-Transfer-Encoding", qp)
		buf.WriteString("\r\n")
		if err := writeQP(&buf, content); err != nil {
			return nil, err
		}
		// SMTP ends a message with a line break: a body without one
		// gets it here, and a reader sees it at the end of the body.
		if !bytes.HasSuffix(buf.Bytes(), []byte("\r\n")) {
			buf.WriteString("\r\n")
		}
	}
	return buf.Bytes(), nil
}

// writeQP writes content to w, quoted-printable, with CRLF line endings.
func writeQP(w interface{ Write([]byte) (int, error) }, content string) error {
	qw := quotedprintable.NewWriter(w)
	if _, err := qw.Write([]byte(content)); err != nil {
		return err
	}
	return qw.Close()
}

// encodeSubject makes a rendered subject a header value: control
// characters (line breaks included, which would otherwise start a header
// of the request's choosing) become spaces, surrounding space is trimmed,
// and a subject that is not printable ASCII is RFC 2047 encoded.
func encodeSubject(subject string) string {
	subject = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, subject))
	return mime.QEncoding.Encode("utf-8", subject)
}

// fold folds a header line at spaces so that each line is at most foldAt
// characters where a space allows it. An encoded subject is a sequence of
// encoded-words separated by spaces, so it folds too.
func fold(line string) string {
	if len(line) <= foldAt {
		return line
	}
	var b strings.Builder
	lineLen := 0
	for i, word := range strings.Split(line, " ") {
		switch {
		case i == 0:
		case i > 1 && word != "" && lineLen+1+len(word) > foldAt:
			// Never right after the name: a line of "Subject:" alone
			// is legal but confuses some readers.
			b.WriteString("\r\n")
			lineLen = 0
			fallthrough
		default:
			b.WriteByte(' ')
			lineLen++
		}
		b.WriteString(word)
		lineLen += len(word)
	}
	return b.String()
}
