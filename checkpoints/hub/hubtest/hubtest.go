// Package hubtest is a Hugging Face Hub on loopback for tests, answering
// as the Hub's documented API does: a revision's files
// (/api/models/REPO/revision/REV?blobs=true), files by
// /REPO/resolve/REV/PATH — an LFS file by a 302 to a second server, the
// CDN, with X-Linked-Etag, X-Linked-Size and X-Repo-Commit — the errors
// 401, 403 and 404 with their X-Error-Code, Range requests (206), and on
// request a corrupted byte or a connection dropped mid-file. It logs every
// request. Nothing but the two loopback servers is involved.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// File is a file of a repo at a commit.
type File struct {
	Path string
	Data []byte
	LFS  bool // stored in Git LFS: served from the CDN by a redirect
}

// Repo is a model repo: its commits' files and the branches and tags that
// name commits.
type Repo struct {
	ID      string
	Commits map[string][]File // by 40-digit commit hash
	Refs    map[string]string // branch or tag → commit
	// Gated repos list their files to anyone but serve them only to
	// Token (401 without a token, 403 with another); Private ones answer
	// nothing without Token (401, as if they did not exist).
	Gated, Private bool
	Token          string
	// RenamedFrom is an older name whose URLs redirect to ID's, by a
	// relative redirect.
	RenamedFrom string
}

// Request is one request either server answered.
type Request struct {
	Server string // "hub" or "cdn"
	Path   string // unescaped
	Range  string // the Range header
	Auth   string // the Authorization header
	Status int
	Bytes  int64 // body bytes sent of a file
}

// Server is the Hub (Hub) and its CDN (CDN), two loopback servers.
type Server struct {
	Hub, CDN *httptest.Server

	mu          sync.Mutex
	repos       map[string]*Repo
	log         []Request
	corrupt     map[string]bool
	drop        map[string][]int64
	ignoreRange bool
}

// New starts a Hub and its CDN, closed when tb's test ends.
func New(tb testing.TB, repos ...Repo) *Server {
	s := &Server{repos: map[string]*Repo{}, corrupt: map[string]bool{}, drop: map[string][]int64{}}
	for i := range repos {
		s.repos[repos[i].ID] = &repos[i]
	}
	s.Hub = httptest.NewServer(http.HandlerFunc(s.hub))
	s.CDN = httptest.NewServer(http.HandlerFunc(s.cdn))
	tb.Cleanup(func() { s.Hub.Close(); s.CDN.Close() })
	return s
}

// URL is the Hub's address, what HF_ENDPOINT is set to.
func (s *Server) URL() string { return s.Hub.URL }

// Corrupt makes every answer with the bytes of path flip one of them.
func (s *Server) Corrupt(path string) { s.mu.Lock(); s.corrupt[path] = true; s.mu.Unlock() }

// DropAfter makes the next answer with the bytes of path close the
// connection after n of them (a hijacked connection closed mid-body); a
// second call, the answer after, and so on.
func (s *Server) DropAfter(path string, n int64) {
	s.mu.Lock()
	s.drop[path] = append(s.drop[path], n)
	s.mu.Unlock()
}

// IgnoreRange makes the servers answer every request with the whole file,
// as a server without Range support does.
func (s *Server) IgnoreRange() { s.mu.Lock(); s.ignoreRange = true; s.mu.Unlock() }

// Requests returns the requests answered so far, and forgets them.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log
	s.log = nil
	return out
}

// ByteRequests counts the requests of rs that asked for a file's bytes.
func ByteRequests(rs []Request) int {
	n := 0
	for _, r := range rs {
		if r.Server == "cdn" || strings.Contains(r.Path, "/resolve/") {
			n++
		}
	}
	return n
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.log = append(s.log, r)
	s.mu.Unlock()
}

// Etag is the blob name of f: an LFS file's SHA-256, another's git blob
// SHA-1.
func Etag(f File) string {
	if f.LFS {
		h := sha256.Sum256(f.Data)
		return hex.EncodeToString(h[:])
	}
	return gitBlob(f.Data)
}

func gitBlob(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func pointer(f File) []byte {
	return []byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", Etag(f), len(f.Data)))
}

func (s *Server) hub(w http.ResponseWriter, r *http.Request) {
	req := Request{Server: "hub", Path: r.URL.Path, Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")}
	defer func() { s.record(req) }()
	fail := func(status int, code string) {
		if code != "" {
			w.Header().Set("X-Error-Code", code)
		}
		req.Status = status
		http.Error(w, code, status)
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	api := len(parts) >= 6 && parts[0] == "api" && parts[1] == "models" && parts[4] == "revision"
	if api {
		parts = parts[2:]
	} else if len(parts) < 5 || parts[2] != "resolve" {
		fail(http.StatusNotFound, "")
		return
	}
	id := parts[0] + "/" + parts[1]
	rev, _ := url.PathUnescape(parts[3])
	file, _ := url.PathUnescape(strings.Join(parts[4:], "/"))
	s.mu.Lock()
	repo := s.repos[id]
	for _, rp := range s.repos {
		if rp.RenamedFrom == id {
			s.mu.Unlock()
			req.Status = http.StatusTemporaryRedirect
			w.Header().Set("Location", strings.Replace(r.URL.EscapedPath(), "/"+id+"/", "/"+rp.ID+"/", 1))
			w.WriteHeader(req.Status)
			return
		}
	}
	s.mu.Unlock()
	authorized := repo != nil && (repo.Token == "" || req.Auth == "Bearer "+repo.Token)
	switch {
	case repo == nil || repo.Private && !authorized:
		if req.Auth == "" {
			fail(http.StatusUnauthorized, "RepoNotFound")
		} else {
			fail(http.StatusNotFound, "RepoNotFound")
		}
		return
	case repo.Gated && !authorized && !api:
		if req.Auth == "" {
			fail(http.StatusUnauthorized, "GatedRepo")
		} else {
			fail(http.StatusForbidden, "GatedRepo")
		}
		return
	}
	commit := rev
	if c, ok := repo.Refs[rev]; ok {
		commit = c
	}
	files, ok := repo.Commits[commit]
	if !ok {
		fail(http.StatusNotFound, "RevisionNotFound")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if api {
		type lfs struct {
			SHA256      string `json:"sha256"`
			Size        int    `json:"size"`
			PointerSize int    `json:"pointerSize"`
		}
		type sibling struct {
			Path   string `json:"rfilename"`
			Size   int    `json:"size"`
			BlobID string `json:"blobId"`
			LFS    *lfs   `json:"lfs,omitempty"`
		}
		info := struct {
			ID       string    `json:"id"`
			SHA      string    `json:"sha"`
			Private  bool      `json:"private"`
			Gated    any       `json:"gated"`
			Siblings []sibling `json:"siblings"`
		}{ID: repo.ID, SHA: commit, Private: repo.Private, Gated: false}
		if repo.Gated {
			info.Gated = "manual"
		}
		for _, f := range files {
			sb := sibling{Path: f.Path, Size: len(f.Data), BlobID: gitBlob(f.Data)}
			if f.LFS {
				p := pointer(f)
				sb.BlobID = gitBlob(p)
				sb.LFS = &lfs{SHA256: Etag(f), Size: len(f.Data), PointerSize: len(p)}
			}
			info.Siblings = append(info.Siblings, sb)
		}
		w.Header().Set("Content-Type", "application/json")
		req.Status = http.StatusOK
		json.NewEncoder(w).Encode(info)
		return
	}
	for _, f := range files {
		if f.Path != file {
			continue
		}
		if f.LFS {
			w.Header().Set("X-Linked-Etag", `"`+Etag(f)+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
			w.Header().Set("ETag", `"`+gitBlob(pointer(f))+`"`)
			w.Header().Set("Location", s.CDN.URL+"/repos/"+Etag(f)+"?file="+url.QueryEscape(f.Path))
			req.Status = http.StatusFound
			w.WriteHeader(req.Status)
			return
		}
		w.Header().Set("ETag", `"`+Etag(f)+`"`)
		s.serve(w, r, f, &req)
		return
	}
	fail(http.StatusNotFound, "EntryNotFound")
}

func (s *Server) cdn(w http.ResponseWriter, r *http.Request) {
	req := Request{Server: "cdn", Path: r.URL.Path, Range: r.Header.Get("Range"), Auth: r.Header.Get("Authorization")}
	defer func() { s.record(req) }()
	etag := strings.TrimPrefix(r.URL.Path, "/repos/")
	s.mu.Lock()
	var found *File
	for _, rp := range s.repos {
		for _, files := range rp.Commits {
			for i := range files {
				if files[i].LFS && Etag(files[i]) == etag {
					found = &files[i]
				}
			}
		}
	}
	s.mu.Unlock()
	if found == nil {
		req.Status = http.StatusNotFound
		http.Error(w, "no such object", req.Status)
		return
	}
	s.serve(w, r, *found, &req)
}

// serve answers with f's bytes: whole, or from a Range's start (bytes=N-
// or bytes=N-M), with the faults asked for.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, f File, req *Request) {
	s.mu.Lock()
	data := f.Data
	if s.corrupt[f.Path] && len(data) > 0 {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0x40
	}
	drop, dropping := int64(0), len(s.drop[f.Path]) > 0
	if dropping {
		drop, s.drop[f.Path] = s.drop[f.Path][0], s.drop[f.Path][1:]
	}
	ignore := s.ignoreRange
	s.mu.Unlock()

	start, end := 0, len(data)
	status := http.StatusOK
	if rg, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes="); ok && !ignore {
		a, b, _ := strings.Cut(rg, "-")
		n, err := strconv.Atoi(a)
		if err != nil || n >= len(data) {
			req.Status = http.StatusRequestedRangeNotSatisfiable
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(req.Status)
			return
		}
		if m, err := strconv.Atoi(b); err == nil && m+1 < end {
			end = m + 1
		}
		start, status = n, http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, len(data)))
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Length", strconv.Itoa(end-start))
	w.Header().Set("Content-Type", "application/octet-stream")
	req.Status = status
	w.WriteHeader(status)
	body := data[start:end]
	if dropping && int(drop) < len(body) {
		w.Write(body[:drop])
		req.Bytes = drop
		rc := http.NewResponseController(w)
		rc.Flush()
		conn, buf, err := rc.Hijack()
		if err == nil {
			buf.Flush()
			conn.Close()
		}
		return
	}
	n, _ := w.Write(body)
	req.Bytes = int64(n)
}

// Folder returns the files under dir as a repo's, the safetensors ones
// in LFS as the Hub keeps them.
func Folder(tb testing.TB, dir string) []File {
	tb.Helper()
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files = append(files, File{Path: filepath.ToSlash(rel), Data: data, LFS: strings.HasSuffix(p, ".safetensors")})
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}
