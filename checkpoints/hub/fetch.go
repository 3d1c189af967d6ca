package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/memtrain/memtrain/internal/atomicfile"
)

// target is one file to fetch: a file of a repo at a commit (the
// revision it came from only for messages).
type target struct {
	repo, revision, commit string
	file                   Sibling
}

// ChecksumError is a file whose bytes do not hash to the Hub's etag. Its
// partial download is removed: the next try fetches it whole.
type ChecksumError struct {
	Repo, File string
	Kind       string // "SHA-256" (an LFS file) or "git blob SHA-1"
	Want, Got  string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("hub: %s/%s: the bytes received have the %s %s, the Hub's is %s: refused, nothing kept", e.Repo, e.File, e.Kind, e.Got, e.Want)
}

// transferError is a transfer that broke off (a connection dropped, a
// server error) after received bytes: the partial file stays, and a retry
// resumes it.
type transferError struct {
	err      error
	received int64
}

func (e *transferError) Error() string { return e.err.Error() }
func (e *transferError) Unwrap() error { return e.err }

// fetch brings t's file into cache's blobs and links it into its
// snapshot, resuming a transfer that broke off, after a short pause, up to
// c.Retries times in a row without a byte received (a try that received
// some starts the count again: a long file on a flaky link gets there).
// progress gets the bytes written (negative when a server that ignores
// Range makes a partial file start over).
func (c *Client) fetch(ctx context.Context, cache Cache, t target, progress func(int64)) error {
	var reported int64 // of this file, so that a retry does not count its partial file again
	report := func(n int64) { reported += n; progress(n) }
	for failed := 0; ; failed++ {
		err := c.fetchOnce(ctx, cache, t, reported, report)
		var te *transferError
		if err == nil || !errors.As(err, &te) {
			return err
		}
		if te.received > 0 {
			failed = 0
		}
		if failed >= c.Retries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(250<<failed) * time.Millisecond):
		}
	}
}

// fetchOnce makes one try: the bytes go to blobs/<etag>.incomplete, from
// where a partial file is resumed with a Range request; once all are
// there and hash to the etag, the file is synced and renamed to
// blobs/<etag>, so that a blob is always whole and checked. done is what
// progress has been told of the file already.
func (c *Client) fetchOnce(ctx context.Context, cache Cache, t target, done int64, progress func(int64)) (err error) {
	f := t.file
	etag := f.Etag()
	blobs := filepath.Join(cache.RepoDir(t.repo), "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	part := filepath.Join(blobs, etag+".incomplete")
	resumable := etag != ""
	if resumable {
		// One writer a blob, whichever program: the partial file is
		// appended to, and a blob another finished meanwhile is reused.
		unlock, err := cache.lockBlob(ctx, t.repo, etag)
		if err != nil {
			return err
		}
		defer unlock()
		if fi, err := os.Stat(cache.blobPath(t.repo, etag)); err == nil && fi.Mode().IsRegular() && fi.Size() == f.Size {
			progress(f.Size - done)
			return cache.link(t.repo, t.commit, f.Path, etag)
		}
	} else {
		// Named once the answer's ETag says what the blob is.
		var r [8]byte
		rand.Read(r[:])
		part = filepath.Join(blobs, "memtrain-"+hex.EncodeToString(r[:])+".incomplete")
	}
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	kept := false
	defer func() {
		out.Close()
		if !kept && (!resumable || !isTransfer(err)) {
			os.Remove(part)
		}
	}()

	// Rehash what an earlier try left.
	sum := newSum(f)
	n, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if n > f.Size {
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		n = 0
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if _, err := io.CopyN(sum, out, n); err != nil {
		return fmt.Errorf("hub: rehashing %s: %w", part, err)
	}
	progress(n - done)

	if n < f.Size || etag == "" {
		if etag, err = c.transfer(ctx, t, out, n, sum, progress); err != nil {
			return err
		}
	}
	if got := hex.EncodeToString(sum.Sum(nil)); (isHex(etag, 64) || isHex(etag, 40)) && got != etag {
		kind := "git blob SHA-1"
		if f.LFS != nil {
			kind = "SHA-256"
		}
		return &ChecksumError{Repo: t.repo, File: f.Path, Kind: kind, Want: etag, Got: got}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(part, cache.blobPath(t.repo, etag)); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	kept = true
	if err := atomicfile.SyncDir(blobs); err != nil {
		return err
	}
	return cache.link(t.repo, t.commit, f.Path, etag)
}

// transfer GETs the file from byte n on into out (positioned at n) and
// sum, checking the answer's commit, etag and size against the file
// list's. It returns the etag: the list's, or when the list gave none,
// the answer's.
func (c *Client) transfer(ctx context.Context, t target, out *os.File, n int64, sum hash.Hash, progress func(int64)) (string, error) {
	f := t.file
	u := c.Endpoint + "/" + t.repo + "/resolve/" + t.commit + "/" + escapePath(f.Path)
	header := http.Header{}
	if n > 0 {
		header.Set("Range", "bytes="+strconv.FormatInt(n, 10)+"-")
	}
	resp, err := c.get(ctx, u, header)
	if err != nil {
		return "", &transferError{err: err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && n > 0:
		if start := contentRangeStart(resp.Header.Get("Content-Range")); start != n {
			return "", fmt.Errorf("hub: %s: asked for bytes from %d on, got Content-Range %q", u, n, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK:
		if n > 0 { // the server sends the whole file: start over
			if err := out.Truncate(0); err != nil {
				return "", fmt.Errorf("hub: %w", err)
			}
			sum.Reset()
			progress(-n)
			n = 0
		}
	case resp.StatusCode >= 500:
		return "", &transferError{err: fmt.Errorf("hub: %s: %s", u, resp.Status)}
	default:
		return "", c.statusError(resp, t.repo, t.revision, f.Path)
	}
	if _, err := out.Seek(n, io.SeekStart); err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}

	etag := f.Etag()
	got := normalizeEtag(resp.Header.Get("X-Linked-Etag"))
	if got == "" {
		got = normalizeEtag(resp.Header.Get("ETag"))
	}
	switch {
	case etag == "" && !isBlobName(got):
		return "", fmt.Errorf("hub: %s: no etag to name the file by (ETag %q)", u, resp.Header.Get("ETag"))
	case etag == "":
		etag = got
	case got != "" && got != etag && (f.LFS != nil || isHex(got, 40)):
		return "", fmt.Errorf("hub: %s: the file list gives the etag %s, the answer %s", u, etag, got)
	}
	if rc := resp.Header.Get("X-Repo-Commit"); rc != "" && rc != t.commit {
		return "", fmt.Errorf("hub: %s: answered from commit %s", u, rc)
	}
	if ls := resp.Header.Get("X-Linked-Size"); ls != "" && ls != strconv.FormatInt(f.Size, 10) {
		return "", fmt.Errorf("hub: %s: the file list gives the size %d, the answer %s", u, f.Size, ls)
	}

	w := io.MultiWriter(out, sum, progressWriter(progress))
	copied, err := io.Copy(w, io.LimitReader(resp.Body, f.Size-n+1))
	n += copied
	switch {
	case err != nil:
		return "", &transferError{fmt.Errorf("hub: %s: the transfer broke off at byte %d of %d: %w", u, n, f.Size, err), copied}
	case n > f.Size:
		return "", fmt.Errorf("hub: %s: more bytes than the file list's size %d", u, f.Size)
	case n < f.Size:
		return "", &transferError{fmt.Errorf("hub: %s: the transfer ended at byte %d of %d", u, n, f.Size), copied}
	}
	return etag, nil
}

// newSum is the hash a file's etag is: an LFS file's SHA-256, another's
// git blob SHA-1 (of "blob SIZE\x00" and the bytes). Reset keeps the
// header.
func newSum(f Sibling) hash.Hash {
	if f.LFS != nil {
		return sha256.New()
	}
	g := &gitSum{Hash: sha1.New(), header: "blob " + strconv.FormatInt(f.Size, 10) + "\x00"}
	g.Reset()
	return g
}

type gitSum struct {
	hash.Hash
	header string
}

func (g *gitSum) Reset() { g.Hash.Reset(); io.WriteString(g.Hash, g.header) }

// normalizeEtag strips a weak validator's W/ and the quotes.
func normalizeEtag(s string) string {
	return strings.Trim(strings.TrimPrefix(s, "W/"), `"`)
}

// isBlobName reports whether an etag from a server is a safe file name.
func isBlobName(s string) bool {
	return s != "" && len(s) <= 128 && s[0] != '.' &&
		strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}

// contentRangeStart is the first byte of "bytes START-END/SIZE", or -1.
func contentRangeStart(s string) int64 {
	r, ok := strings.CutPrefix(s, "bytes ")
	start, _, ok2 := strings.Cut(r, "-")
	v, err := strconv.ParseInt(start, 10, 64)
	if !ok || !ok2 || err != nil {
		return -1
	}
	return v
}

// escapePath escapes each part of a repo path for a URL.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func isTransfer(err error) bool {
	var te *transferError
	return errors.As(err, &te)
}

type progressWriter func(int64)

func (p progressWriter) Write(b []byte) (int, error) { p(int64(len(b))); return len(b), nil }
