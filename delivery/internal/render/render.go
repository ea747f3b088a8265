// Package render is the template rendering the delivery modules share
// (mail, sms, push): a [text/template] or [html/template] parsed once,
// with a reference to a value the request does not carry as an error that
// names the value, and never quotes the request's data.
//
// render imports only the standard library.
package render

import (
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	"github.com/tidings-go/tidings/delivery"
)

// Template is one part (a body, a title, a subject) of a message an
// application registered, parsed once with missingkey=error. It is
// immutable and safe for concurrent use.
type Template struct {
	name string
	part string
	t    executor
}

// executor is what Template needs of a parsed template: a
// [*template.Template] or an [*htmltemplate.Template].
type executor interface {
	Execute(w io.Writer, data any) error
}

// Parse parses src as a [text/template], the part of the template called
// name. The error quotes src's position and text, not any request's data:
// it is for New, not for a reason.
func Parse(name, part, src string) (*Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{name: name, part: part, t: t}, nil
}

// ParseHTML parses src as an [html/template], the part of the template
// called name, which escapes values in the output. It escapes the template
// now, so that an escaping error is ParseHTML's and not Execute's. The
// error, as Parse's, quotes src's position and text, not any request's
// data.
func ParseHTML(name, part, src string) (*Template, error) {
	t, err := htmltemplate.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
	}
	if err := t.Execute(io.Discard, map[string]any{}); err != nil {
		// html/template escapes on the first execution, before it
		// evaluates anything. Without functions of our own, this execution
		// has no effect; it stops at the first value the empty data lacks,
		// which is no error of the template's.
		if _, ok := errors.AsType[*htmltemplate.Error](err); ok {
			return nil, err
		}
	}
	return &Template{name: name, part: part, t: t}, nil
}

// Execute renders t with data as dot; nil data means no values. Its error
// is an [*Error].
func (t *Template) Execute(data map[string]any) (string, error) {
	if data == nil {
		data = map[string]any{}
	}
	var b strings.Builder
	if err := t.t.Execute(&b, data); err != nil {
		return "", newError(t.name, t.part, err)
	}
	return b.String(), nil
}

// Lookup returns the template called name in templates, a module's
// Config.Templates once parsed. When there is none, its error wraps
// unknown, the module's ErrUnknownTemplate, and says why: the request
// names no template, or one that is not in Config.Templates.
func Lookup[T any](templates map[string]T, name string, unknown error) (T, error) {
	var none T
	if name == "" {
		return none, fmt.Errorf("%w: the request names none", unknown)
	}
	t, ok := templates[name]
	if !ok {
		return none, fmt.Errorf("%w: %q is not in Config.Templates", unknown, name)
	}
	return t, nil
}

// Error is the reason of a request whose template did not render. Its text
// names the template and the missing value, or the place in the template
// that failed; never a value of the request.
type Error struct {
	// Prefix starts the text, such as "mail: ", for a module whose reason
	// is the Error itself. Empty means none: sms and push leave it so,
	// and wrap the Error in a reason that starts with their name.
	Prefix string
	// Template is the template's name.
	Template string
	// Part is what failed to render, such as "body", "title" or
	// "html body".
	Part string
	// Missing is the value the template refers to and the request does
	// not carry, such as "name" or "user.name"; empty when the failure is
	// another.
	Missing string
	// Location is where the template failed, such as
	// `welcome:1:12 <index .items 5>`; empty when unknown.
	Location string
	// Err is the template package's error. Its text can quote values of
	// the request: never print it on its own.
	Err error
}

// Error says which template needs what, as in `template "welcome" needs
// "name", which the request does not carry`, after the Prefix.
// Code returns the error's machine code: delivery.CodeMissingValue or
// delivery.CodeTemplateFailed.
func (e *Error) Code() string {
	if e.Missing != "" {
		return delivery.CodeMissingValue
	}
	return delivery.CodeTemplateFailed
}

func (e *Error) Error() string {
	if e.Missing != "" {
		return e.Prefix + "template " + strconv.Quote(e.Template) + " needs " + strconv.Quote(e.Missing) +
			", which the request does not carry"
	}
	msg := e.Prefix + "template " + strconv.Quote(e.Template) + " failed to render its " + e.Part
	if e.Location != "" {
		msg += " at " + e.Location
	}
	return msg
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

var (
	// execPattern matches an ExecError: the template's position and the
	// node that failed, both from its source, then the failure, which can
	// quote the data.
	execPattern = regexp.MustCompile(`(?s)^template: (.*?:\d+:\d+): executing "(?:[^"\\]|\\.)*" at <(.*?)>: (.*)$`)
	// missingKeyPattern matches the failure of a template executed with
	// missingkey=error on a map that lacks the key. The key is a field
	// name from the template's source, not from the data.
	missingKeyPattern = regexp.MustCompile(`(?s)^map has no entry for key ("(?:[^"\\]|\\.)*")$`)
	// fieldChainPattern matches a node that is a chain of field names.
	fieldChainPattern = regexp.MustCompile(`^\$?\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)$`)
)

// newError describes err, which executing part of template name returned.
func newError(name, part string, err error) *Error {
	e := &Error{Template: name, Part: part, Err: err}
	if _, ok := errors.AsType[template.ExecError](err); !ok {
		return e // not the template's failure: keep the cause only
	}
	m := execPattern.FindStringSubmatch(err.Error())
	if m == nil {
		return e
	}
	node := m[2]
	e.Location = m[1] + " <" + node + ">"
	if k := missingKeyPattern.FindStringSubmatch(m[3]); k != nil {
		if key, uerr := strconv.Unquote(k[1]); uerr == nil {
			e.Missing = key
			// ".user.name" says more than "name".
			if c := fieldChainPattern.FindStringSubmatch(node); c != nil && (c[1] == key || strings.HasSuffix(c[1], "."+key)) {
				e.Missing = c[1]
			}
		}
	}
	return e
}
