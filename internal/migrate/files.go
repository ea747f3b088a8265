package migrate

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fileName is how a component names its migration files: golang-migrate's
// NNN_title.up.sql and NNN_title.down.sql.
var fileName = regexp.MustCompile(`^([0-9]+)_(.+)\.(up|down)\.sql$`)

// version is one version of a component's migrations, as its files give it.
type version struct {
	number   int
	title    string // what the file names hold between the number and .up.sql
	up, down file   // down.name is "" when the version has no down file
}

// file is one migration file.
type file struct {
	name string
	body []byte
}

// parse reads the migration files at the root of fsys (every *.sql there)
// and returns their versions in order. Every version has an up file; a
// down file is optional here, and required by the layouts for the tools.
func parse(fsys fs.FS) ([]version, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	byNumber := map[int]*version{}
	for _, name := range names {
		m := fileName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("%s: name must be NNN_title.up.sql or NNN_title.down.sql", name)
		}
		number, err := strconv.Atoi(m[1])
		if err != nil || number <= 0 {
			return nil, fmt.Errorf("%s: name must start with a positive version and an underscore", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		v := byNumber[number]
		if v == nil {
			v = &version{number: number, title: m[2]}
			byNumber[number] = v
		}
		f := &v.up
		if m[3] == "down" {
			f = &v.down
		}
		other := cmp.Or(f.name, v.up.name, v.down.name)
		if f.name != "" || v.title != m[2] {
			return nil, fmt.Errorf("%s and %s share version %d", other, name, number)
		}
		*f = file{name: name, body: body}
	}
	versions := make([]version, 0, len(byNumber))
	for _, v := range byNumber {
		if v.up.name == "" {
			return nil, fmt.Errorf("%s has no up file", v.down.name)
		}
		versions = append(versions, *v)
	}
	slices.SortFunc(versions, func(a, b version) int { return a.number - b.number })
	return versions, nil
}

// parsePairs is parse for the tools' layouts: every version needs a down
// file too, or rolling it back would only forget it.
func parsePairs(fsys fs.FS) ([]version, error) {
	versions, err := parse(fsys)
	if err != nil {
		return nil, err
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("no NNN_title.up.sql file")
	}
	for _, v := range versions {
		if v.down.name == "" {
			return nil, fmt.Errorf("%s has no down file", v.up.name)
		}
	}
	return versions, nil
}

// GolangMigrate returns the migration files of fsys as golang-migrate
// reads them, which is how components name them: NNN_title.up.sql and
// NNN_title.down.sql. It checks them as Goose does: names, one version per
// pair, a down file for every up file.
func GolangMigrate(fsys fs.FS) (fs.FS, error) {
	versions, err := parsePairs(fsys)
	if err != nil {
		return nil, err
	}
	files := memFS{}
	for _, v := range versions {
		files[v.up.name] = v.up.body
		files[v.down.name] = v.down.body
	}
	return files, nil
}

// Goose returns the migration files of fsys as goose reads them: for each
// version one file, NNNNN_title.sql with the version and title of the
// pair, whose -- +goose Up section holds the up file and whose
// -- +goose Down section holds the down file.
//
// Each section is one -- +goose StatementBegin ... StatementEnd block, so
// goose sends the file's SQL to the server whole, as golang-migrate and
// Apply do, instead of cutting it at every line that ends in a semicolon:
// a function body, a string or a comment with such a line stays intact,
// and the three ways of migrating run the same SQL. A section without SQL
// (only blank lines and comments) gets no block, since goose would send
// an empty statement. An up or down file with a line that goose would
// read as an annotation (a comment that holds +goose) is an error.
func Goose(fsys fs.FS) (fs.FS, error) {
	versions, err := parsePairs(fsys)
	if err != nil {
		return nil, err
	}
	files := memFS{}
	for _, v := range versions {
		var b bytes.Buffer
		fmt.Fprintf(&b, "-- Made from %s and %s: change those, not this file.\n\n", v.up.name, v.down.name)
		for _, s := range []struct {
			annotation string
			f          file
		}{{"Up", v.up}, {"Down", v.down}} {
			if err := gooseSection(&b, s.annotation, s.f); err != nil {
				return nil, err
			}
		}
		files[fmt.Sprintf("%05d_%s.sql", v.number, v.title)] = b.Bytes()
	}
	return files, nil
}

// gooseSection writes f as the section of a goose file that annotation
// (Up or Down) opens.
func gooseSection(b *bytes.Buffer, annotation string, f file) error {
	hasSQL := false
	for line := range strings.Lines(string(f.body)) {
		trimmed := strings.TrimSpace(line)
		isComment := strings.HasPrefix(trimmed, "--")
		if isComment && strings.Contains(line, "+goose") {
			return fmt.Errorf("%s: goose would read %q as an annotation", f.name, trimmed)
		}
		if trimmed != "" && !isComment {
			hasSQL = true
		}
	}
	if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n\n")) {
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "-- +goose %s\n", annotation)
	if hasSQL {
		b.WriteString("-- +goose StatementBegin\n")
	}
	b.Write(f.body)
	if len(f.body) > 0 && f.body[len(f.body)-1] != '\n' {
		b.WriteString("\n")
	}
	if hasSQL {
		b.WriteString("-- +goose StatementEnd\n")
	}
	return nil
}

// memFS is a read-only file system of files at its root, keyed by name.
type memFS map[string][]byte

var (
	_ fs.ReadDirFS  = memFS(nil)
	_ fs.ReadFileFS = memFS(nil)
)

// Open opens the file name, or "." for the root directory.
func (m memFS) Open(name string) (fs.File, error) {
	if name == "." {
		entries, _ := m.ReadDir(".")
		return &memDir{entries: entries}, nil
	}
	body, ok := m[name]
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{info: memInfo{name: name, size: int64(len(body))}, r: bytes.NewReader(body)}, nil
}

// ReadFile returns a copy of the file name's bytes.
func (m memFS) ReadFile(name string) ([]byte, error) {
	body, ok := m[name]
	if !ok || !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return bytes.Clone(body), nil
}

// ReadDir returns the files of the root directory, sorted by name.
func (m memFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	entries := make([]fs.DirEntry, 0, len(m))
	for n, body := range m {
		entries = append(entries, fs.FileInfoToDirEntry(memInfo{name: n, size: int64(len(body))}))
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// memInfo describes a file of a memFS, or its root when dir is set.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

// memFile is an open file of a memFS.
type memFile struct {
	info memInfo
	r    *bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *memFile) Close() error               { return nil }

// memDir is the open root directory of a memFS.
type memDir struct {
	entries []fs.DirEntry
	next    int
}

func (d *memDir) Stat() (fs.FileInfo, error) { return memInfo{name: ".", dir: true}, nil }
func (d *memDir) Close() error               { return nil }

func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}

// ReadDir returns the next n entries, or all that are left when n <= 0.
func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	left := d.entries[d.next:]
	if n <= 0 {
		d.next = len(d.entries)
		return left, nil
	}
	if len(left) == 0 {
		return nil, io.EOF
	}
	left = left[:min(n, len(left))]
	d.next += len(left)
	return left, nil
}
