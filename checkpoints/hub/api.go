// Package hub downloads model repositories from the Hugging Face Hub (or a
// mirror of its API) into the local cache that huggingface_hub keeps, in
// its layout, so that files Python tools downloaded are used as they are
// and files memtrain downloads serve them in turn.
//
// The Hub's API gives a revision's commit and its files (api.go); the
// cache holds blobs named by their etag, snapshots of links to them and
// refs from a branch or tag to its commit (cache.go); one file is fetched
// with redirects, resumption and its checksum (fetch.go); a download plans
// which files a fine-tune needs and fetches them in parallel (download.go).
//
// It never imports the engine: it moves files, and checkpoints reads them.
package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hub's address; $HF_ENDPOINT names a mirror.
const DefaultEndpoint = "https://huggingface.co"

// DefaultRevision is the branch a download takes unless told otherwise.
const DefaultRevision = "main"

// maxAPIBytes bounds the API's answer: a repo of 10,000 files lists in
// about 2 MB.
const maxAPIBytes = 32 << 20

// Client talks to a Hub endpoint. Its zero value is not usable: NewClient
// fills it in, and a caller may change the fields before the first call.
type Client struct {
	// Endpoint is the Hub's base URL, without a trailing slash.
	Endpoint string
	// Token, when not empty, is sent as a bearer token to the endpoint's
	// host and never to another (a redirect to a CDN drops it).
	Token string
	// HTTP does the requests; its redirects are not followed by it but by
	// the client, which decides where the token goes.
	HTTP *http.Client
	// Retries is how many times a file whose transfer broke off is
	// resumed before the download gives up.
	Retries int
}

// NewClient returns a client of endpoint ("" for DefaultEndpoint) that
// sends token ("" for none).
func NewClient(endpoint, token string) *Client {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	return &Client{
		Endpoint: strings.TrimRight(endpoint, "/"),
		Token:    token,
		HTTP: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		Retries: 3,
	}
}

// EnvEndpoint and EnvToken are huggingface_hub's environment variables
// for a mirror and an access token.
const (
	EnvEndpoint = "HF_ENDPOINT"
	EnvToken    = "HF_TOKEN"
)

// EnvClient returns a client of $HF_ENDPOINT with token, or when token is
// empty $HF_TOKEN, or the token huggingface-cli login saved
// ($HF_TOKEN_PATH, by default $HF_HOME/token).
func EnvClient(token string) *Client {
	if token == "" {
		token = os.Getenv(EnvToken)
	}
	if token == "" {
		p := os.Getenv("HF_TOKEN_PATH")
		if p == "" {
			if home, err := hfHome(); err == nil {
				p = filepath.Join(home, "token")
			}
		}
		if b, err := os.ReadFile(p); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	return NewClient(os.Getenv(EnvEndpoint), token)
}

// RepoInfo is the API's answer about a model repo at a revision.
type RepoInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"` // the revision's commit
	Private  bool      `json:"private"`
	Siblings []Sibling `json:"siblings"`
}

// Sibling is one file of a repo at a commit.
type Sibling struct {
	Path   string `json:"rfilename"`
	Size   int64  `json:"size"`   // the file's size, an LFS file's own (not its pointer's)
	BlobID string `json:"blobId"` // the git blob's SHA-1; an LFS file's pointer's
	LFS    *LFS   `json:"lfs"`
}

// LFS is what the API says of a file stored in Git LFS.
type LFS struct {
	SHA256      string `json:"sha256"` // the file's, and its etag on the Hub
	Size        int64  `json:"size"`
	PointerSize int64  `json:"pointerSize"`
}

// Etag is the name huggingface_hub gives the file's blob in the cache: an
// LFS file's SHA-256, another's git blob SHA-1 ("" when the API did not
// say).
func (s Sibling) Etag() string {
	if s.LFS != nil {
		return s.LFS.SHA256
	}
	return s.BlobID
}

// RepoInfo asks the API for repo's files at revision (a branch, a tag or a
// commit) and the commit it names.
func (c *Client) RepoInfo(ctx context.Context, repo, revision string) (*RepoInfo, error) {
	if err := CheckRepo(repo); err != nil {
		return nil, err
	}
	if err := checkRevision(revision); err != nil {
		return nil, err
	}
	u := c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(revision) + "?blobs=true"
	resp, err := c.get(ctx, u, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(resp, repo, revision, "")
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBytes+1))
	if err != nil {
		return nil, fmt.Errorf("hub: reading %s: %w", u, err)
	}
	if len(data) > maxAPIBytes {
		return nil, fmt.Errorf("hub: %s: the answer is over %d MiB", u, maxAPIBytes>>20)
	}
	info, err := ParseRepoInfo(data)
	if err != nil {
		return nil, fmt.Errorf("hub: %s at %s: %w", repo, revision, err)
	}
	return info, nil
}

// ParseRepoInfo decodes and checks the API's answer: the commit a
// 40-digit hex hash, every file a relative path that stays inside a
// folder (it becomes one in the cache), listed once, with a size and
// etags of the form the Hub gives (a 64-digit SHA-256, a 40-digit SHA-1).
func ParseRepoInfo(data []byte) (*RepoInfo, error) {
	var info RepoInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("the API's answer is not a repo's info: %w", err)
	}
	// A size the answer leaves out would read as 0: the API gives sizes
	// only with blobs=true, which a mirror might ignore.
	var sized struct {
		Siblings []struct {
			Size *int64 `json:"size"`
		} `json:"siblings"`
	}
	json.Unmarshal(data, &sized)
	for i, s := range sized.Siblings {
		if s.Size == nil && i < len(info.Siblings) {
			return nil, fmt.Errorf("the API gives no size for %q (a mirror that ignores blobs=true?)", info.Siblings[i].Path)
		}
	}
	if !isHex(info.SHA, 40) {
		return nil, fmt.Errorf("the API's answer has no commit hash (sha %q)", info.SHA)
	}
	seen := make(map[string]bool, len(info.Siblings))
	for _, s := range info.Siblings {
		if err := checkRepoPath(s.Path); err != nil {
			return nil, fmt.Errorf("the API lists %w", err)
		}
		if seen[s.Path] {
			return nil, fmt.Errorf("the API lists %q twice", s.Path)
		}
		seen[s.Path] = true
		if s.Size < 0 {
			return nil, fmt.Errorf("the API gives %s a size of %d", s.Path, s.Size)
		}
		if s.BlobID != "" && !isHex(s.BlobID, 40) {
			return nil, fmt.Errorf("the API gives %s the blob id %q, not a SHA-1", s.Path, s.BlobID)
		}
		if s.LFS != nil {
			if !isHex(s.LFS.SHA256, 64) {
				return nil, fmt.Errorf("the API gives %s the LFS hash %q, not a SHA-256", s.Path, s.LFS.SHA256)
			}
			if s.LFS.Size != s.Size {
				return nil, fmt.Errorf("the API gives %s the size %d and the LFS size %d", s.Path, s.Size, s.LFS.Size)
			}
		}
	}
	return &info, nil
}

// CheckRepo checks a repo id: a name or NAMESPACE/NAME, each part of
// letters, digits, '-', '_' and '.', not starting or ending with '-' or
// '.', without "--" or ".." (huggingface_hub's rules, which keep the cache
// folder's name models--NAMESPACE--NAME unambiguous), at most 96 bytes.
func CheckRepo(repo string) error {
	parts := strings.Split(repo, "/")
	ok := len(repo) <= 96 && len(parts) <= 2
	for _, p := range parts {
		ok = ok && p != "" && !strings.Contains(p, "--") && !strings.Contains(p, "..") &&
			strings.Trim(p, "-.") == p && strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
	}
	if !ok {
		return fmt.Errorf("hub: %q is not a Hub repo id (want NAMESPACE/NAME, such as meta-llama/Llama-3.2-1B)", repo)
	}
	return nil
}

// ParseModelRef splits a model reference NAMESPACE/NAME or
// NAMESPACE/NAME@REVISION into the repo and its revision (DefaultRevision
// when not given). ok is false for anything else, such as a path of one
// or of three parts.
func ParseModelRef(s string) (repo, revision string, ok bool) {
	repo, revision, found := strings.Cut(s, "@")
	if !found {
		revision = DefaultRevision
	}
	if strings.Count(repo, "/") != 1 || CheckRepo(repo) != nil || checkRevision(revision) != nil {
		return "", "", false
	}
	return repo, revision, true
}

// checkRevision refuses a revision that, as a path under refs/, would
// leave it.
func checkRevision(rev string) error {
	if err := checkRepoPath(rev); err != nil {
		return fmt.Errorf("hub: revision %q: not a branch, tag or commit", rev)
	}
	return nil
}

// checkRepoPath checks that p is a relative slash-separated path whose
// parts are not empty, "." or "..", without backslashes or NULs: joined
// to a folder, it stays inside.
func checkRepoPath(p string) error {
	if p == "" || strings.ContainsAny(p, "\\\x00") || path.IsAbs(p) {
		return fmt.Errorf("%q, not a relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%q, not a clean relative path", p)
		}
	}
	return nil
}

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// AccessError is a repo the Hub does not let this client read: a 401 or a
// 403. Without a token the Hub answers 401 for a gated or private repo and
// for one that does not exist alike.
type AccessError struct {
	Repo, Page string // Page is the repo's page on the Hub
	Status     int
	Gated      bool // the Hub said so (X-Error-Code: GatedRepo)
	TokenSent  bool
	Message    string // the Hub's, when it gave one
}

func (e *AccessError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub: %s: access refused (HTTP %d", e.Repo, e.Status)
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	b.WriteString("): ")
	switch {
	case e.Gated:
		b.WriteString("the repo is gated")
	case e.TokenSent:
		b.WriteString("the repo is gated or private, or does not exist, and the token sent has no access to it")
	default:
		b.WriteString("the repo is gated or private (or does not exist), and no token was sent")
	}
	fmt.Fprintf(&b, "; to get access, accept its licence on %s while logged in and use an access token of that account (%s/settings/tokens)", e.Page, strings.TrimSuffix(e.Page, "/"+e.Repo))
	return b.String()
}

// NotFoundError is a repo, a revision or a file the Hub does not have.
type NotFoundError struct {
	Repo, Revision, File string // File is "" for a repo or a revision
	What                 string // "repo", "revision", "file", or "repo or revision" when the server did not say
}

func (e *NotFoundError) Error() string {
	switch e.What {
	case "repo":
		return fmt.Sprintf("hub: repo %s not found", e.Repo)
	case "revision":
		return fmt.Sprintf("hub: revision %s not found in repo %s", e.Revision, e.Repo)
	case "file":
		return fmt.Sprintf("hub: file %s not found in repo %s at revision %s", e.File, e.Repo, e.Revision)
	}
	return fmt.Sprintf("hub: repo %s or its revision %s not found", e.Repo, e.Revision)
}

// statusError turns a failed answer about repo (and file, when not empty)
// into an error. It reads huggingface_hub's X-Error-Code and
// X-Error-Message headers, which say which of repo, revision or file is
// missing.
func (c *Client) statusError(resp *http.Response, repo, revision, file string) error {
	code, msg := resp.Header.Get("X-Error-Code"), resp.Header.Get("X-Error-Message")
	// Only the Hub's own answers speak of the repo: a CDN's 403 is its
	// own (an expired link, say).
	hub := resp.Request == nil || strings.HasPrefix(resp.Request.URL.String(), c.Endpoint+"/")
	switch {
	case !hub:
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || code == "GatedRepo":
		return &AccessError{Repo: repo, Page: c.Endpoint + "/" + repo, Status: resp.StatusCode,
			Gated: code == "GatedRepo", TokenSent: c.Token != "", Message: msg}
	case resp.StatusCode == http.StatusNotFound:
		e := &NotFoundError{Repo: repo, Revision: revision, File: file}
		switch {
		case code == "RepoNotFound":
			e.What = "repo"
		case code == "RevisionNotFound":
			e.What = "revision"
		case code == "EntryNotFound" || file != "":
			e.What = "file"
		default:
			e.What = "repo or revision"
		}
		return e
	}
	if msg == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg = strings.TrimSpace(string(b))
	}
	what := repo
	if file != "" {
		what += "/" + file
	}
	if !hub {
		what += " (from " + resp.Request.URL.Host + ")"
	}
	return fmt.Errorf("hub: %s at %s: %s: %s", what, revision, resp.Status, msg)
}

// get GETs u with header, following up to 10 redirects itself: the token
// goes only to the endpoint's own scheme and host (a relative redirect,
// such as a renamed repo's, keeps it; a CDN's host does not get it). The
// answer of the last hop is returned, with the headers of a redirect on
// the way that carried X-Linked-Etag, X-Linked-Size or X-Repo-Commit
// copied into it where it lacks them (the Hub puts them on its 302).
func (c *Client) get(ctx context.Context, u string, header http.Header) (*http.Response, error) {
	base, err := url.Parse(c.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("hub: endpoint %q: %w", c.Endpoint, err)
	}
	linked := http.Header{}
	for hop := 0; ; hop++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		// The bytes as stored: a transparent gunzip would hash other
		// bytes than the Hub's, and resume at other offsets.
		req.Header.Set("Accept-Encoding", "identity")
		req.Header.Set("User-Agent", "memtrain")
		if c.Token != "" && req.URL.Scheme == base.Scheme && req.URL.Host == base.Host {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
		for _, k := range []string{"X-Linked-Etag", "X-Linked-Size", "X-Repo-Commit"} {
			if v := resp.Header.Get(k); v != "" && linked.Get(k) == "" {
				linked.Set(k, v)
			}
		}
		loc := resp.Header.Get("Location")
		if resp.StatusCode < 300 || resp.StatusCode > 399 || loc == "" {
			for k := range linked {
				if resp.Header.Get(k) == "" {
					resp.Header.Set(k, linked.Get(k))
				}
			}
			return resp, nil
		}
		resp.Body.Close()
		if hop == 10 {
			return nil, fmt.Errorf("hub: %s: more than 10 redirects", u)
		}
		next, err := req.URL.Parse(loc)
		if err != nil {
			return nil, fmt.Errorf("hub: %s redirects to %q: %w", u, loc, err)
		}
		u = next.String()
	}
}
