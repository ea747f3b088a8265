package migrate_test

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/internal/migrate"
)

// twoVersions is a component's files: a plain first version, and a second
// whose function body has lines that end in a semicolon, with a down file
// that is only a comment.
var twoVersions = fstest.MapFS{
	"001_notes.up.sql":   {Data: []byte("-- Notes.\nCREATE TABLE notes (id int PRIMARY KEY);\n")},
	"001_notes.down.sql": {Data: []byte("DROP TABLE notes;")},
	"002_touch.up.sql": {Data: []byte(`CREATE FUNCTION touch() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    RETURN 1;
END
$$;
`)},
	"002_touch.down.sql": {Data: []byte("-- Nothing to undo.\n")},
}

func TestGoose(t *testing.T) {
	t.Parallel()

	t.Run("OneFilePerVersionWithBothSections", func(t *testing.T) {
		t.Parallel()
		files, err := migrate.Goose(twoVersions)
		require.NoError(t, err)
		require.NoError(t, fstest.TestFS(files, "00001_notes.sql", "00002_touch.sql"))
		names, err := fs.Glob(files, "*")
		require.NoError(t, err)
		require.Equal(t, []string{"00001_notes.sql", "00002_touch.sql"}, names)

		first, err := fs.ReadFile(files, "00001_notes.sql")
		require.NoError(t, err)
		require.Equal(t, `-- Made from 001_notes.up.sql and 001_notes.down.sql: change those, not this file.

-- +goose Up
-- +goose StatementBegin
-- Notes.
CREATE TABLE notes (id int PRIMARY KEY);
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP TABLE notes;
-- +goose StatementEnd
`, string(first))

		// The function stays in one block; a Down section without SQL
		// gets none, or goose would send an empty statement.
		second, err := fs.ReadFile(files, "00002_touch.sql")
		require.NoError(t, err)
		require.Equal(t, `-- Made from 002_touch.up.sql and 002_touch.down.sql: change those, not this file.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION touch() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    RETURN 1;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to undo.
`, string(second))
	})

	t.Run("AnAnnotationInTheSQLIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := migrate.Goose(fstest.MapFS{
			"001_a.up.sql":   {Data: []byte("SELECT 1;\n  -- +goose Down\nSELECT 2;\n")},
			"001_a.down.sql": {Data: []byte("SELECT 3;\n")},
		})
		require.ErrorContains(t, err, "001_a.up.sql")
		require.ErrorContains(t, err, "annotation")
	})
}

func TestGolangMigrate(t *testing.T) {
	t.Parallel()
	files, err := migrate.GolangMigrate(twoVersions)
	require.NoError(t, err)
	names := []string{"001_notes.down.sql", "001_notes.up.sql", "002_touch.down.sql", "002_touch.up.sql"}
	require.NoError(t, fstest.TestFS(files, names...))
	have, err := fs.Glob(files, "*")
	require.NoError(t, err)
	require.Equal(t, names, have)
	for _, name := range names {
		body, err := fs.ReadFile(files, name)
		require.NoError(t, err)
		require.Equal(t, twoVersions[name].Data, body, name)
	}
}

// TestLayoutsRefuse checks what both layouts refuse, each error naming the
// file at fault.
func TestLayoutsRefuse(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"NoFiles", fstest.MapFS{}, "no NNN_title.up.sql"},
		{"AnUpWithoutDown", fstest.MapFS{"001_a.up.sql": file("SELECT 1;")}, "001_a.up.sql has no down file"},
		{"ADownWithoutUp", fstest.MapFS{"001_a.down.sql": file("SELECT 1;")}, "001_a.down.sql has no up file"},
		{"TwoUpsOfOneVersion", fstest.MapFS{
			"001_a.up.sql": file("SELECT 1;"), "1_a.up.sql": file("SELECT 1;"), "001_a.down.sql": file("SELECT 1;"),
		}, "share version 1"},
		{"TwoTitlesOfOneVersion", fstest.MapFS{
			"001_a.up.sql": file("SELECT 1;"), "001_b.down.sql": file("SELECT 1;"),
		}, "share version 1"},
		{"NoDirection", fstest.MapFS{"001_a.sql": file("SELECT 1;")}, "001_a.sql: name must be"},
		{"NoVersion", fstest.MapFS{"a_b.up.sql": file("SELECT 1;")}, "a_b.up.sql: name must be"},
		{"VersionZero", fstest.MapFS{"000_a.up.sql": file("SELECT 1;"), "000_a.down.sql": file("SELECT 1;")}, "positive version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for layout, fn := range map[string]func(fs.FS) (fs.FS, error){
				"Goose":         migrate.Goose,
				"GolangMigrate": migrate.GolangMigrate,
			} {
				files, err := fn(tc.files)
				require.ErrorContains(t, err, tc.want, layout)
				require.Nil(t, files, layout)
			}
		})
	}
}
