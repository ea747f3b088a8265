// Package render is the template rendering the text delivery modules
// share (sms, push): a [text/template] parsed once, with a reference to a
// value the request does not carry as an error that names the value, and
// never quotes the request's data.
//
// render imports only the standard library.
package render

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

// Template is one part (a body, a title) of a message an application
// registered, parsed once with missingkey=error. It is immutable and safe
// for concurrent use.
type Template struct {
	name string
	part string
	t    *template.Template
}

// Parse parses src as the part of the template called name. The error
// quotes src's position and text, not any request's data: it is for New,
// not for a reason.
func Parse(name, part, src string) (*Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
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

// Error is the reason of a request whose template did not render. Its text
// names the template and the missing value, or the place in the template
// that failed; never a value of the request.
type Error struct {
	// Template is the template's name.
	Template string
	// Part is what failed to render, such as "body" or "title".
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
// "name", which the request does not carry`.
func (e *Error) Error() string {
	if e.Missing != "" {
		return "template " + strconv.Quote(e.Template) + " needs " + strconv.Quote(e.Missing) +
			", which the request does not carry"
	}
	msg := "template " + strconv.Quote(e.Template) + " failed to render its " + e.Part
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
