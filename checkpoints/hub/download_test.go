package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints/hub/hubtest"
)

const (
	commit1 = "1111111111111111111111111111111111111111"
	commit2 = "2222222222222222222222222222222222222222"
	repoID  = "acme/tiny-llama"
)

// randomBytes is n bytes of a seeded stream, distinct per seed.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// repoFiles is a repo as the Hub holds a sharded Llama: what a fine-tune
// needs, and what it does not (PyTorch and GGUF weights, Meta's
// original/ folder, a README, Mistral's consolidated weights).
func repoFiles(seed uint64) []hubtest.File {
	return []hubtest.File{
		{Path: "config.json", Data: []byte(fmt.Sprintf(`{"model_type": "llama", "seed": %d}`, seed))},
		{Path: "generation_config.json", Data: []byte(`{"bos_token_id": 1}`)},
		{Path: "tokenizer.json", Data: randomBytes(seed+1, 3000)},
		{Path: "tokenizer_config.json", Data: []byte(`{}`)},
		{Path: "special_tokens_map.json", Data: []byte(`{}`)},
		{Path: "model.safetensors.index.json", Data: []byte(`{"weight_map": {}}`)},
		{Path: "model-00001-of-00002.safetensors", Data: randomBytes(seed+2, 200_000), LFS: true},
		{Path: "model-00002-of-00002.safetensors", Data: randomBytes(seed+3, 150_001), LFS: true},
		{Path: "consolidated.safetensors", Data: randomBytes(seed+4, 1000), LFS: true},
		{Path: "pytorch_model.bin", Data: randomBytes(seed+5, 1000), LFS: true},
		{Path: "model.gguf", Data: randomBytes(seed+6, 1000), LFS: true},
		{Path: "original/consolidated.00.pth", Data: randomBytes(seed+7, 1000), LFS: true},
		{Path: "original/params.json", Data: []byte(`{"dim": 64}`)},
		{Path: "README.md", Data: []byte("# tiny\n")},
	}
}

func testRepo() hubtest.Repo {
	return hubtest.Repo{
		ID:      repoID,
		Commits: map[string][]hubtest.File{commit1: repoFiles(1), commit2: repoFiles(2)},
		Refs:    map[string]string{"main": commit2, "v1.0": commit1},
	}
}

// loopbackClient is a client of srv's Hub whose connections can only go
// to loopback addresses: a test that tried another would fail, not leave
// the machine.
func loopbackClient(t *testing.T, srv *hubtest.Server, token string) *Client {
	t.Helper()
	c := NewClient(srv.URL(), token)
	dialer := &net.Dialer{}
	c.HTTP.Transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("dial %s: not a loopback address", addr)
			return nil, fmt.Errorf("test: %s is not loopback", addr)
		}
		return dialer.DialContext(ctx, network, addr)
	}}
	c.Retries = 0
	return c
}

func download(t *testing.T, c *Client, cache Cache, repo string, opt Options) (*Plan, int64, error) {
	t.Helper()
	p, err := c.Plan(context.Background(), cache, repo, opt)
	if err != nil {
		return nil, 0, err
	}
	var seen int64
	err = c.Download(context.Background(), p, 3, func(n int64) { seen += n })
	return p, seen, err
}

// fileOf returns the file at path in files.
func fileOf(t *testing.T, files []hubtest.File, path string) hubtest.File {
	t.Helper()
	for _, f := range files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("no file %s", path)
	return hubtest.File{}
}

// checkSnapshot checks that the snapshot of commit holds exactly want, each
// a relative link to its blob named by its etag, with its bytes.
func checkSnapshot(t *testing.T, cache Cache, commit string, files []hubtest.File, want []string) {
	t.Helper()
	dir := cache.SnapshotDir(repoID, commit)
	var got []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("snapshot %s holds %q, want %q", commit, got, want)
	}
	for _, p := range want {
		f := fileOf(t, files, p)
		entry := filepath.Join(dir, filepath.FromSlash(p))
		link, err := os.Readlink(entry)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		wantLink := strings.Repeat("../", 2+strings.Count(p, "/")) + "blobs/" + hubtest.Etag(f)
		if filepath.ToSlash(link) != wantLink {
			t.Errorf("%s links to %s, want %s", p, link, wantLink)
		}
		b, err := os.ReadFile(entry)
		if err != nil || !bytes.Equal(b, f.Data) {
			t.Errorf("%s: %d bytes read (%v), want its %d", p, len(b), err, len(f.Data))
		}
	}
}

// noPartials fails if a blob download was left behind.
func noPartials(t *testing.T, cache Cache) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cache.RepoDir(repoID), "blobs", "*.incomplete"))
	if len(m) > 0 {
		t.Errorf("partial files left: %q", m)
	}
}

func TestDownloadDefault(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	p, seen, err := download(t, c, cache, repoID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
		"model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	if p.Commit != commit2 || p.Snapshot() != cache.SnapshotDir(repoID, commit2) {
		t.Errorf("main resolved to %s (%s), want %s", p.Commit, p.Snapshot(), commit2)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), want)
	if ref, err := os.ReadFile(filepath.Join(cache.RepoDir(repoID), "refs", "main")); err != nil || string(ref) != commit2 {
		t.Errorf("refs/main holds %q (%v), want %s without a newline", ref, err, commit2)
	}
	// tokenizer_config.json and special_tokens_map.json are both "{}":
	// one blob, fetched and counted once.
	var total int64
	blobs := map[string]bool{}
	for _, path := range want {
		f := fileOf(t, repoFiles(2), path)
		if !blobs[hubtest.Etag(f)] {
			blobs[hubtest.Etag(f)] = true
			total += int64(len(f.Data))
		}
	}
	if len(blobs) != len(want)-1 {
		t.Fatalf("%d blobs for %d files: the test repo has changed", len(blobs), len(want))
	}
	if seen != total || p.Bytes() != total {
		t.Errorf("progress reported %d bytes, the plan %d, want %d", seen, p.Bytes(), total)
	}
	// The LFS shards came from the CDN after a redirect; the others
	// from the Hub.
	cdn := 0
	for _, r := range srv.Requests() {
		if r.Server == "cdn" {
			cdn++
		}
	}
	if cdn != 2 {
		t.Errorf("%d CDN requests, want the 2 shards'", cdn)
	}
	noPartials(t, cache)
}

func TestDownloadRevisions(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	for _, tc := range []struct {
		rev, commit string
		ref         bool // whether refs/<rev> is written
	}{
		{"v1.0", commit1, true},
		{commit1, commit1, false},
		{"main", commit2, true},
	} {
		t.Run(tc.rev, func(t *testing.T) {
			cache := Cache{Dir: t.TempDir()}
			p, _, err := download(t, loopbackClient(t, srv, ""), cache, repoID, Options{Revision: tc.rev, Files: []string{"config.json"}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Commit != tc.commit {
				t.Fatalf("%s resolved to %s, want %s", tc.rev, p.Commit, tc.commit)
			}
			checkSnapshot(t, cache, tc.commit, testRepo().Commits[tc.commit], []string{"config.json"})
			_, err = os.Stat(filepath.Join(cache.RepoDir(repoID), "refs", tc.rev))
			if (err == nil) != tc.ref {
				t.Errorf("refs/%s exists: %v, want %v", tc.rev, err == nil, tc.ref)
			}
			if got, err := cache.Commit(repoID, tc.rev); err != nil || got != tc.commit {
				t.Errorf("cache.Commit(%s) = %s, %v; want %s", tc.rev, got, err, tc.commit)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	var list []Sibling
	for _, f := range repoFiles(1) {
		list = append(list, Sibling{Path: f.Path, Size: int64(len(f.Data))})
	}
	for _, tc := range []struct {
		name string
		opt  Options
		want []string
		err  string
	}{
		{"default", Options{}, []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
			"model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}, ""},
		{"files", Options{Files: []string{"README.md", "original/params.json"}}, []string{"README.md", "original/params.json"}, ""},
		{"include", Options{Include: []string{"*.json"}}, []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
			"model-00002-of-00002.safetensors", "model.safetensors.index.json", "original/params.json", "special_tokens_map.json",
			"tokenizer.json", "tokenizer_config.json"}, ""},
		{"include folder", Options{Include: []string{"original/"}, Exclude: []string{"*.safetensors", "*.json"}},
			[]string{"original/consolidated.00.pth"}, ""},
		{"files include exclude", Options{Files: []string{"tokenizer.json"}, Include: []string{"*.json", "*.gguf"}, Exclude: []string{"*token*", "original/*"}},
			[]string{"config.json", "generation_config.json", "model.gguf", "model.safetensors.index.json", "tokenizer.json"}, ""},
		{"default exclude", Options{Exclude: []string{"model-0000[2-9]-*"}}, []string{"config.json", "generation_config.json",
			"model-00001-of-00002.safetensors", "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}, ""},
		{"set", Options{Files: []string{"README.md"}, Include: []string{"model-0000[!1]-of-?????.safetensors"}}, []string{"README.md", "model-00002-of-00002.safetensors"}, ""},
		{"files and include", Options{Files: []string{"README.md"}, Include: []string{"*.gguf"}}, []string{"README.md", "model.gguf"}, ""},
		{"missing file", Options{Files: []string{"nosuch.json"}}, nil, "file nosuch.json not found"},
		{"nothing", Options{Exclude: []string{"*"}, Include: []string{"*.onnx"}}, nil, "no file is selected"},
		{"no weights", Options{Exclude: []string{"*.safetensors"}}, nil, "no safetensors weights"},
		{"bad glob", Options{Include: []string{"[]"}}, nil, `glob "[]"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Select(list, tc.opt)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, s := range got {
				paths = append(paths, s.Path)
			}
			if !slices.Equal(paths, tc.want) {
				t.Errorf("selected %q, want %q", paths, tc.want)
			}
		})
	}
}

func TestAccessAndNotFound(t *testing.T) {
	gated := testRepo()
	gated.ID, gated.Gated, gated.Token = "meta/gated", true, "hf_good"
	private := testRepo()
	private.ID, private.Private, private.Token = "acme/private", true, "hf_good"
	srv := hubtest.New(t, testRepo(), gated, private)
	for _, tc := range []struct {
		name, repo, token, rev string
		files                  []string
		check                  func(error) bool
		msg                    []string
	}{
		{"gated without token", "meta/gated", "", "", nil, isAccess(401, true),
			[]string{"meta/gated", "HTTP 401", "gated", "accept its licence on " + srv.URL() + "/meta/gated", srv.URL() + "/settings/tokens"}},
		{"gated with another token", "meta/gated", "hf_other", "", nil, isAccess(403, true), []string{"meta/gated", "HTTP 403", "gated"}},
		{"private without token", "acme/private", "", "", nil, isAccess(401, false),
			[]string{"acme/private", "gated or private", "no token was sent", "accept its licence"}},
		{"private with another token", "acme/private", "hf_other", "", nil, isNotFound("repo"), []string{"repo acme/private not found"}},
		{"no such repo", "acme/nosuch", "hf_good", "", nil, isNotFound("repo"), []string{"repo acme/nosuch not found"}},
		{"no such revision", repoID, "", "v9", nil, isNotFound("revision"), []string{"revision v9 not found in repo " + repoID}},
		{"no such file", repoID, "", "", []string{"nosuch.json"}, isNotFound("file"), []string{"file nosuch.json not found in repo " + repoID + " at revision main"}},
		{"gated with its token", "meta/gated", "hf_good", "", nil, func(err error) bool { return err == nil }, nil},
		{"private with its token", "acme/private", "hf_good", "", nil, func(err error) bool { return err == nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := download(t, loopbackClient(t, srv, tc.token), Cache{Dir: t.TempDir()}, tc.repo, Options{Revision: tc.rev, Files: tc.files})
			if !tc.check(err) {
				t.Fatalf("err = %v (%T)", err, err)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q does not say %q", err, m)
				}
			}
		})
	}
}

func isAccess(status int, gated bool) func(error) bool {
	return func(err error) bool {
		var ae *AccessError
		return errors.As(err, &ae) && ae.Status == status && ae.Gated == gated
	}
}

func isNotFound(what string) func(error) bool {
	return func(err error) bool {
		var nf *NotFoundError
		return errors.As(err, &nf) && nf.What == what
	}
}

// The token goes to the Hub, across a renamed repo's relative redirect,
// and never to the CDN the Hub redirects LFS files to.
func TestAuthorizationNotForwarded(t *testing.T) {
	repo := testRepo()
	repo.RenamedFrom = "acme/old-name"
	srv := hubtest.New(t, repo)
	if _, _, err := download(t, loopbackClient(t, srv, "hf_secret"), Cache{Dir: t.TempDir()}, "acme/old-name", Options{}); err != nil {
		t.Fatal(err)
	}
	hub, cdn := 0, 0
	for _, r := range srv.Requests() {
		switch {
		case r.Server == "cdn" && r.Auth != "":
			t.Errorf("the CDN got Authorization %q for %s", r.Auth, r.Path)
		case r.Server == "cdn":
			cdn++
		case r.Auth != "Bearer hf_secret":
			t.Errorf("the Hub got Authorization %q for %s", r.Auth, r.Path)
		default:
			hub++
		}
	}
	if hub == 0 || cdn == 0 {
		t.Errorf("%d Hub and %d CDN requests: the test did not exercise both", hub, cdn)
	}
}

// A connection dropped mid-file leaves blobs/<etag>.incomplete; the next
// download asks for the rest with a Range and gets only that.
func TestResume(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	shard := fileOf(t, repoFiles(2), "model-00001-of-00002.safetensors")
	const cut = 70_001
	srv.DropAfter(shard.Path, cut)
	opt := Options{Files: []string{shard.Path, "config.json"}}
	_, _, err := download(t, c, cache, repoID, opt)
	if !isTransfer(err) {
		t.Fatalf("err = %v, want a broken transfer", err)
	}
	part := cache.blobPath(repoID, hubtest.Etag(shard)) + ".incomplete"
	if fi, err := os.Stat(part); err != nil || fi.Size() != cut {
		t.Fatalf("partial file: %v, want %d bytes", err, cut)
	}
	if _, err := cache.Commit(repoID, "main"); err == nil {
		t.Error("refs/main written by a failed download")
	}
	srv.Requests()

	p, seen, err := download(t, c, cache, repoID, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), []string{shard.Path, "config.json"})
	var sent int64
	for _, r := range srv.Requests() {
		if r.Server == "cdn" {
			sent += r.Bytes
			if want := fmt.Sprintf("bytes=%d-", cut); r.Range != want {
				t.Errorf("resumed with Range %q, want %q", r.Range, want)
			}
		}
	}
	if sent != int64(len(shard.Data)-cut) {
		t.Errorf("the resume fetched %d bytes, want the %d left", sent, len(shard.Data)-cut)
	}
	// Progress counts the bytes already there as done.
	if seen != p.Bytes() {
		t.Errorf("progress %d, want %d", seen, p.Bytes())
	}
	noPartials(t, cache)
}

// With retries, a dropped connection is resumed within the same download.
func TestResumeRetries(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	c.Retries = 1
	shard := fileOf(t, repoFiles(2), "model-00002-of-00002.safetensors")
	srv.DropAfter(shard.Path, 1000)
	srv.DropAfter("tokenizer.json", 10) // a file the Hub serves itself
	p, seen, err := download(t, c, cache, repoID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if seen != p.Bytes() {
		t.Errorf("progress %d, want %d: a retry counted its partial file again", seen, p.Bytes())
	}
	ranges := 0
	for _, r := range srv.Requests() {
		if r.Range != "" && r.Status == http.StatusPartialContent {
			ranges++
		}
	}
	if ranges != 2 {
		t.Errorf("%d partial answers to Range requests, want 2", ranges)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
}

// Retries count tries in a row that received nothing: a link that drops
// again and again, each time after some bytes, still gets the file.
func TestResumeKeepsGoing(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	c.Retries = 1
	shard := fileOf(t, repoFiles(2), "model-00002-of-00002.safetensors")
	for range 4 {
		srv.DropAfter(shard.Path, 20_000)
	}
	p, seen, err := download(t, c, cache, repoID, Options{Files: []string{shard.Path}})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), []string{shard.Path})
	var starts []string
	for _, r := range srv.Requests() {
		if r.Server == "cdn" {
			starts = append(starts, r.Range)
		}
	}
	want := []string{"", "bytes=20000-", "bytes=40000-", "bytes=60000-", "bytes=80000-"}
	if !slices.Equal(starts, want) || seen != p.Bytes() {
		t.Errorf("CDN requests %q, progress %d; want %q, %d", starts, seen, want, p.Bytes())
	}
}

// A server that ignores Range sends the whole file: the partial one starts
// over, and progress is taken back.
func TestResumeWithoutRange(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	shard := fileOf(t, repoFiles(2), "model-00001-of-00002.safetensors")
	srv.DropAfter(shard.Path, 5000)
	opt := Options{Files: []string{shard.Path}}
	if _, _, err := download(t, c, cache, repoID, opt); err == nil {
		t.Fatal("the dropped connection was not an error")
	}
	srv.IgnoreRange()
	p, seen, err := download(t, c, cache, repoID, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), []string{shard.Path})
	if seen != p.Bytes() {
		t.Errorf("progress %d, want %d", seen, p.Bytes())
	}
}

// A corrupted byte fails the file's checksum — an LFS file's SHA-256,
// another's git blob SHA-1 — and nothing of the file is kept.
func TestChecksumRefused(t *testing.T) {
	for _, path := range []string{"model-00002-of-00002.safetensors", "tokenizer.json"} {
		t.Run(path, func(t *testing.T) {
			srv := hubtest.New(t, testRepo())
			cache := Cache{Dir: t.TempDir()}
			srv.Corrupt(path)
			_, _, err := download(t, loopbackClient(t, srv, ""), cache, repoID, Options{Files: []string{path}})
			var ce *ChecksumError
			if !errors.As(err, &ce) || ce.File != path {
				t.Fatalf("err = %v, want a checksum error of %s", err, path)
			}
			f := fileOf(t, repoFiles(2), path)
			if ce.Want != hubtest.Etag(f) {
				t.Errorf("checked against %s, want the etag %s", ce.Want, hubtest.Etag(f))
			}
			blobs, _ := os.ReadDir(filepath.Join(cache.RepoDir(repoID), "blobs"))
			if len(blobs) != 0 {
				t.Errorf("blobs kept: %v", blobs)
			}
			if _, err := os.Lstat(filepath.Join(cache.SnapshotDir(repoID, commit2), path)); err == nil {
				t.Error("the snapshot links the refused file")
			}
		})
	}
}

// A second download asks the Hub for the file list and for no byte.
func TestCacheReuse(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	if _, _, err := download(t, c, cache, repoID, Options{}); err != nil {
		t.Fatal(err)
	}
	srv.Requests()
	p, seen, err := download(t, c, cache, repoID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rs := srv.Requests(); hubtest.ByteRequests(rs) != 0 || len(p.Fetch) != 0 || seen != 0 {
		t.Errorf("the second download fetched %d files, %d bytes, in %d requests: %v", len(p.Fetch), seen, hubtest.ByteRequests(rs), rs)
	}
}

// A cache that huggingface_hub filled is used as it is: a snapshot's
// entries, and a blob that another commit's snapshot holds (linked into
// the new one without a request for its bytes).
func TestCacheFromPython(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	files := repoFiles(2)
	repoDir := cache.RepoDir(repoID)
	// As huggingface_hub writes them: blobs by etag, relative links,
	// refs/main without a newline. The tokenizer's blob is there, its
	// entry in this snapshot not (an older commit had the same file).
	put := func(p string, link bool) {
		f := fileOf(t, files, p)
		blob := filepath.Join(repoDir, "blobs", hubtest.Etag(f))
		os.MkdirAll(filepath.Dir(blob), 0o755)
		if err := os.WriteFile(blob, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		if link {
			entry := filepath.Join(repoDir, "snapshots", commit2, p)
			os.MkdirAll(filepath.Dir(entry), 0o755)
			if err := os.Symlink("../../blobs/"+hubtest.Etag(f), entry); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		put(p, true)
	}
	put("tokenizer.json", false)
	os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755)
	os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(commit2), 0o644)

	if _, _, err := download(t, loopbackClient(t, srv, ""), cache, repoID, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.Requests() {
		for _, p := range []string{"/config.json", "/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors", "/tokenizer.json"} {
			if strings.HasSuffix(r.Path, p) || r.Server == "cdn" {
				t.Errorf("asked for %s, which the cache holds", r.Path)
			}
		}
	}
	checkSnapshot(t, cache, commit2, files, []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
	if dir, err := cache.Snapshot(repoID, "main"); err != nil || dir != cache.SnapshotDir(repoID, commit2) {
		t.Errorf("Snapshot(main) = %s, %v", dir, err)
	}
}

// Two paths with the same bytes are one blob, fetched once.
func TestSharedBlob(t *testing.T) {
	repo := testRepo()
	same := randomBytes(99, 4096)
	repo.Commits[commit2] = append(repo.Commits[commit2],
		hubtest.File{Path: "a.safetensors", Data: same, LFS: true}, hubtest.File{Path: "b.safetensors", Data: same, LFS: true})
	srv := hubtest.New(t, repo)
	cache := Cache{Dir: t.TempDir()}
	if _, _, err := download(t, loopbackClient(t, srv, ""), cache, repoID, Options{Files: []string{"a.safetensors", "b.safetensors"}}); err != nil {
		t.Fatal(err)
	}
	if n := hubtest.ByteRequests(srv.Requests()); n != 2 { // one resolve, one CDN
		t.Errorf("%d byte requests, want 2", n)
	}
	checkSnapshot(t, cache, commit2, repo.Commits[commit2], []string{"a.safetensors", "b.safetensors"})
}

func TestSnapshotMissing(t *testing.T) {
	cache := Cache{Dir: t.TempDir()}
	srv := hubtest.New(t, testRepo())
	for _, tc := range []struct {
		name, rev string
		files     []string
		reason    string
	}{
		{"nothing", "main", nil, "no ref"},
		{"no weights", "main", []string{"config.json"}, "no safetensors weights"},
		{"no config", commit1, []string{"model-00001-of-00002.safetensors"}, "no config.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.files != nil {
				if _, _, err := download(t, loopbackClient(t, srv, ""), cache, repoID, Options{Revision: tc.rev, Files: tc.files}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := cache.Snapshot(repoID, tc.rev)
			var nc *NotCachedError
			if !errors.As(err, &nc) || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), repoID) {
				t.Errorf("err = %v, want a NotCachedError saying %q", err, tc.reason)
			}
		})
	}
}

func TestParseModelRef(t *testing.T) {
	for _, tc := range []struct {
		in, repo, rev string
		ok            bool
	}{
		{"meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-1B", "main", true},
		{"org/name@v1.0", "org/name", "v1.0", true},
		{"org/name@refs/pr/1", "org/name", "refs/pr/1", true},
		{"org/name@" + commit1, "org/name", commit1, true},
		{"name", "", "", false},
		{"./org/name", "", "", false},
		{"a/b/c", "", "", false},
		{"/org/name", "", "", false},
		{"org/name@", "", "", false},
		{"org/name@../../x", "", "", false},
		{"org--x/name", "", "", false},
		{"org/-name", "", "", false},
		{"run/checkpoints", "run/checkpoints", "main", true}, // a path that does not exist looks like one
	} {
		repo, rev, ok := ParseModelRef(tc.in)
		if repo != tc.repo || rev != tc.rev || ok != tc.ok {
			t.Errorf("ParseModelRef(%q) = %q, %q, %v; want %q, %q, %v", tc.in, repo, rev, ok, tc.repo, tc.rev, tc.ok)
		}
	}
}

// statusError reads the Hub's answers by their status and X-Error-Code,
// and leaves another host's (a CDN's expired link) as that host's.
func TestStatusError(t *testing.T) {
	c := NewClient("https://hub.example", "")
	for _, tc := range []struct {
		name, url, code string
		status          int
		check           func(error) bool
		msg             string
	}{
		{"gated", "https://hub.example/a/b/resolve/main/x", "GatedRepo", 403, isAccess(403, true), "the repo is gated"},
		{"unauthorized", "https://hub.example/api/models/a/b/revision/main", "", 401, isAccess(401, false), "no token was sent"},
		{"repo", "https://hub.example/api/models/a/b/revision/main", "RepoNotFound", 404, isNotFound("repo"), "repo a/b not found"},
		{"mirror 404", "https://hub.example/api/models/a/b/revision/main", "", 404, isNotFound("repo or revision"), "repo a/b or its revision main not found"},
		{"cdn 403", "https://cdn.example/blob", "", 403, func(err error) bool {
			var ae *AccessError
			return err != nil && !errors.As(err, &ae)
		}, "a/b/x (from cdn.example) at main: 403 Forbidden: expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, tc.url, nil)
			resp := &http.Response{StatusCode: tc.status, Status: fmt.Sprintf("%d %s", tc.status, http.StatusText(tc.status)),
				Header: http.Header{}, Body: io.NopCloser(strings.NewReader("expired")), Request: req}
			if tc.code != "" {
				resp.Header.Set("X-Error-Code", tc.code)
			}
			file := ""
			if strings.Contains(tc.url, "/resolve/") || strings.Contains(tc.url, "cdn") {
				file = "x"
			}
			err := c.statusError(resp, "a/b", "main", file)
			if !tc.check(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v (%T), want one saying %q", err, err, tc.msg)
			}
		})
	}
}
