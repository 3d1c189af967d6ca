package hub

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseRepoInfo holds the API answer's parser to its promises on any
// input: no panic, and an accepted answer's commit is a hash and its
// paths stay inside the snapshot folder they are joined to, once each.
func FuzzParseRepoInfo(f *testing.F) {
	f.Add([]byte(`{"id":"a/b","sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"config.json","size":2,"blobId":"0123456789abcdef0123456789abcdef01234567"},{"rfilename":"m.safetensors","size":5,"lfs":{"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":5,"pointerSize":130}}]}`))
	f.Add([]byte(`{"sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"../x"}]}`))
	f.Add([]byte(`{"sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"a//b","size":-1}]}`))
	f.Add([]byte(`{"sha":"../../etc","siblings":[]}`))
	f.Add([]byte(`{"sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"a","size":1},{"rfilename":"a","size":1}]}`))
	f.Add([]byte(`{"sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"config.json"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := ParseRepoInfo(data)
		if err != nil {
			return
		}
		if !isHex(info.SHA, 40) {
			t.Fatalf("accepted commit %q", info.SHA)
		}
		root := filepath.Join("cache", "snapshots", info.SHA)
		seen := map[string]bool{}
		for _, s := range info.Siblings {
			p := filepath.Join(root, filepath.FromSlash(s.Path))
			if rel, err := filepath.Rel(root, p); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
				t.Fatalf("accepted path %q leaves the snapshot (%s)", s.Path, p)
			}
			if seen[s.Path] || s.Size < 0 {
				t.Fatalf("accepted %q twice or with size %d", s.Path, s.Size)
			}
			seen[s.Path] = true
			if e := s.Etag(); e != "" && !isHex(e, 40) && !isHex(e, 64) {
				t.Fatalf("accepted etag %q for %q", e, s.Path)
			}
		}
	})
}

func TestParseRepoInfo(t *testing.T) {
	const sha = `"sha":"1111111111111111111111111111111111111111"`
	const lfs = `"lfs":{"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":5,"pointerSize":130}`
	for _, tc := range []struct{ name, json, err string }{
		{"ok", `{` + sha + `,"siblings":[{"rfilename":"m.safetensors","size":5,` + lfs + `}]}`, ""},
		{"no commit", `{"siblings":[]}`, "no commit hash"},
		{"commit as a path", `{"sha":"../../../../tmp/x","siblings":[]}`, "no commit hash"},
		{"parent path", `{` + sha + `,"siblings":[{"rfilename":"../config.json","size":1}]}`, "not a clean relative path"},
		{"absolute path", `{` + sha + `,"siblings":[{"rfilename":"/etc/passwd","size":1}]}`, "not a relative path"},
		{"backslash", `{` + sha + `,"siblings":[{"rfilename":"a\\..\\b","size":1}]}`, "not a relative path"},
		{"twice", `{` + sha + `,"siblings":[{"rfilename":"a","size":1},{"rfilename":"a","size":1}]}`, "twice"},
		{"no size", `{` + sha + `,"siblings":[{"rfilename":"a"}]}`, "no size for \"a\""},
		{"negative size", `{` + sha + `,"siblings":[{"rfilename":"a","size":-1}]}`, "a size of -1"},
		{"bad blob id", `{` + sha + `,"siblings":[{"rfilename":"a","size":1,"blobId":"../x"}]}`, "not a SHA-1"},
		{"lfs size", `{` + sha + `,"siblings":[{"rfilename":"m","size":6,` + lfs + `}]}`, "the LFS size 5"},
		{"not json", `<html>`, "not a repo's info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRepoInfo([]byte(tc.json))
			if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want %q", err, tc.err)
			}
		})
	}
}
