package render_test

import (
	"errors"
	htmltemplate "html/template"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/delivery/internal/render"
)

func TestExecute(t *testing.T) {
	t.Parallel()

	t.Run("Renders", func(t *testing.T) {
		t.Parallel()
		tmpl, err := render.Parse("welcome", "body", "Hello {{.name}}, {{.user.city}}")
		require.NoError(t, err)
		got, err := tmpl.Execute(map[string]any{"name": "Ada", "user": map[string]any{"city": "London"}})
		require.NoError(t, err)
		require.Equal(t, "Hello Ada, London", got)
	})

	t.Run("NilDataIsNoValues", func(t *testing.T) {
		t.Parallel()
		tmpl, err := render.Parse("static", "body", "Hello")
		require.NoError(t, err)
		got, err := tmpl.Execute(nil)
		require.NoError(t, err)
		require.Equal(t, "Hello", got)

		tmpl, err = render.Parse("welcome", "body", "Hello {{.name}}")
		require.NoError(t, err)
		_, err = tmpl.Execute(nil)
		rerr, ok := errors.AsType[*render.Error](err)
		require.True(t, ok, "%v", err)
		require.Equal(t, "name", rerr.Missing)
	})

	for _, tt := range []struct {
		name     string
		src      string
		data     map[string]any
		missing  string
		location string
		text     string
	}{
		{
			name:     "MissingKey",
			src:      "Hello {{.name}}",
			data:     map[string]any{"other": "secret-value"},
			missing:  "name",
			location: "welcome:1:8 <.name>",
			text:     `template "welcome" needs "name", which the request does not carry`,
		},
		{
			name:     "MissingNestedKey",
			src:      "Hello {{.user.name}}",
			data:     map[string]any{"user": map[string]any{"city": "secret-value"}},
			missing:  "user.name",
			location: "welcome:1:13 <.user.name>",
			text:     `template "welcome" needs "user.name", which the request does not carry`,
		},
		{
			name:     "MissingParent",
			src:      "Hello {{.user.name}}",
			data:     map[string]any{"other": "secret-value"},
			missing:  "user",
			location: "welcome:1:13 <.user.name>",
			text:     `template "welcome" needs "user", which the request does not carry`,
		},
		{
			name:     "OtherFailure",
			src:      "First: {{index .items 5}}",
			data:     map[string]any{"items": []string{"secret-value"}},
			location: "welcome:1:9 <index .items 5>",
			text:     `template "welcome" failed to render its body at welcome:1:9 <index .items 5>`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := render.Parse("welcome", "body", tt.src)
			require.NoError(t, err)

			_, err = tmpl.Execute(tt.data)
			rerr, ok := errors.AsType[*render.Error](err)
			require.True(t, ok, "%v", err)
			require.Equal(t, "welcome", rerr.Template)
			require.Equal(t, "body", rerr.Part)
			require.Equal(t, tt.missing, rerr.Missing)
			require.Equal(t, tt.location, rerr.Location)
			require.Equal(t, tt.text, err.Error())
			require.NotContains(t, err.Error(), "secret-value")
			require.Error(t, errors.Unwrap(err))
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	_, err := render.Parse("broken", "body", "Hello {{.name")
	require.Error(t, err)
}

func TestParseHTML(t *testing.T) {
	t.Parallel()

	t.Run("EscapesValues", func(t *testing.T) {
		t.Parallel()
		tmpl, err := render.ParseHTML("welcome", "html body", `<p>Hello {{.name}}</p>`)
		require.NoError(t, err)
		got, err := tmpl.Execute(map[string]any{"name": "<b>Ada</b>"})
		require.NoError(t, err)
		require.Equal(t, "<p>Hello &lt;b&gt;Ada&lt;/b&gt;</p>", got)
	})

	t.Run("MissingKey", func(t *testing.T) {
		t.Parallel()
		tmpl, err := render.ParseHTML("welcome", "html body", `<p>Hello {{.user.name}}</p>`)
		require.NoError(t, err)
		_, err = tmpl.Execute(map[string]any{"user": map[string]any{"city": "secret-value"}})
		rerr, ok := errors.AsType[*render.Error](err)
		require.True(t, ok, "%v", err)
		require.Equal(t, "html body", rerr.Part)
		require.Equal(t, "user.name", rerr.Missing)
		require.Equal(t, `template "welcome" needs "user.name", which the request does not carry`, err.Error())
		require.NotContains(t, err.Error(), "secret-value")
	})

	t.Run("EscapingErrorIsParseHTMLs", func(t *testing.T) {
		t.Parallel()
		// The branches of the if end in different HTML contexts.
		_, err := render.ParseHTML("broken", "html body", `{{if .x}}<a href="{{end}}">link</a>`)
		_, ok := errors.AsType[*htmltemplate.Error](err)
		require.True(t, ok, "%v", err)
	})

	t.Run("SyntaxError", func(t *testing.T) {
		t.Parallel()
		_, err := render.ParseHTML("broken", "html body", "<p>{{.name</p>")
		require.Error(t, err)
	})
}

func TestErrorPrefix(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		err  render.Error
		want string
	}{
		{err: render.Error{Template: "welcome", Missing: "name"}, want: `template "welcome" needs "name", which the request does not carry`},
		{err: render.Error{Prefix: "mail: ", Template: "welcome", Missing: "name"}, want: `mail: template "welcome" needs "name", which the request does not carry`},
		{err: render.Error{Prefix: "mail: ", Template: "index", Part: "text body", Location: "index:1:9 <index .items 5>"}, want: `mail: template "index" failed to render its text body at index:1:9 <index .items 5>`},
		{err: render.Error{Prefix: "mail: ", Template: "index", Part: "subject"}, want: `mail: template "index" failed to render its subject`},
	} {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.err.Error())
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()

	errUnknown := errors.New("acme: unknown template")
	templates := map[string]int{"welcome": 1}

	got, err := render.Lookup(templates, "welcome", errUnknown)
	require.NoError(t, err)
	require.Equal(t, 1, got)

	_, err = render.Lookup(templates, "", errUnknown)
	require.ErrorIs(t, err, errUnknown)
	require.EqualError(t, err, "acme: unknown template: the request names none")

	_, err = render.Lookup(templates, "farewell", errUnknown)
	require.ErrorIs(t, err, errUnknown)
	require.EqualError(t, err, `acme: unknown template: "farewell" is not in Config.Templates`)
}
