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
	f.Add([]byte(`{"sha":"1111111111111111111111111111111111111111","siblings":[{"rfilename":"a"},{"rfilename":"a"}]}`))
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
