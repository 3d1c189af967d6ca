package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/flock"
)

// Cache is huggingface_hub's cache of Hub repos, its "hub" folder. A
// model repo NAMESPACE/NAME has the folder models--NAMESPACE--NAME, which
// holds
//
//	blobs/<etag>               a file's bytes, named by its etag (an LFS
//	                           file's SHA-256, another's git blob SHA-1);
//	                           blobs/<etag>.incomplete while it downloads
//	snapshots/<commit>/<path>  a relative link to ../../blobs/<etag> (one
//	                           more ../ a folder level of path)
//	refs/<revision>            a branch's or tag's commit, 40 hex digits
//	                           without a newline
//
// A file shared by two commits is one blob; a snapshot holds the files
// that were fetched at its commit, not necessarily all of them.
type Cache struct {
	Dir string
}

// DefaultCache is the cache huggingface_hub uses: $HF_HUB_CACHE (or its
// older name $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, $HF_HOME being
// by default $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface.
func DefaultCache() (Cache, error) {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(k); d != "" {
			return Cache{Dir: d}, nil
		}
	}
	home, err := hfHome()
	if err != nil {
		return Cache{}, err
	}
	return Cache{Dir: filepath.Join(home, "hub")}, nil
}

// hfHome is huggingface_hub's $HF_HOME.
func hfHome() (string, error) {
	if d := os.Getenv("HF_HOME"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("hub: no cache folder (set HF_HOME or HF_HUB_CACHE): %w", err)
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// RepoDir is a model repo's folder in the cache.
func (c Cache) RepoDir(repo string) string {
	return filepath.Join(c.Dir, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// SnapshotDir is the folder of repo's files at commit.
func (c Cache) SnapshotDir(repo, commit string) string {
	return filepath.Join(c.RepoDir(repo), "snapshots", commit)
}

func (c Cache) blobPath(repo, etag string) string {
	return filepath.Join(c.RepoDir(repo), "blobs", etag)
}

func (c Cache) refPath(repo, revision string) string {
	return filepath.Join(c.RepoDir(repo), "refs", filepath.FromSlash(revision))
}

// Commit is the commit revision names in the cache: a commit hash itself,
// or what refs/<revision> holds.
func (c Cache) Commit(repo, revision string) (string, error) {
	if isHex(revision, 40) {
		return revision, nil
	}
	if err := checkRevision(revision); err != nil {
		return "", err
	}
	b, err := os.ReadFile(c.refPath(repo, revision))
	if errors.Is(err, fs.ErrNotExist) {
		return "", &NotCachedError{Repo: repo, Revision: revision, Cache: c.Dir, Reason: "the cache has no ref of that revision"}
	}
	if err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}
	commit := strings.TrimSpace(string(b))
	if !isHex(commit, 40) {
		return "", fmt.Errorf("hub: %s holds %q, not a commit hash", c.refPath(repo, revision), commit)
	}
	return commit, nil
}

// setRef records that revision names commit, unless it is commit itself or
// already recorded (a cache that is not writable is then left alone).
func (c Cache) setRef(repo, revision, commit string) error {
	if revision == commit {
		return nil
	}
	p := c.refPath(repo, revision)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := atomicfile.WriteFile(p, []byte(commit)); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// link points snapshots/<commit>/<p> at blobs/<etag> by a relative link,
// replacing what was there in one rename.
func (c Cache) link(repo, commit, p, etag string) error {
	dst := filepath.Join(c.SnapshotDir(repo, commit), filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), c.blobPath(repo, etag))
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	var r [8]byte
	rand.Read(r[:])
	tmp := dst + ".tmp-" + hex.EncodeToString(r[:])
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

// lockBlob takes huggingface_hub's lock of a blob,
// .locks/models--NAMESPACE--NAME/<etag>.lock, polling while another
// process (a Python download, another memtrain) holds it, and returns its
// release.
func (c Cache) lockBlob(ctx context.Context, repo, etag string) (unlock func(), err error) {
	p := filepath.Join(c.Dir, ".locks", filepath.Base(c.RepoDir(repo)), etag+".lock")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	for {
		ok, err := flock.TryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("hub: locking %s: %w", p, err)
		}
		if ok {
			return func() { f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// has reports whether s is in the cache at commit: its snapshot entry or,
// when the API gave its etag, its blob is a regular file of its size. A
// blob without its entry is linked to it (huggingface_hub's reuse of a
// file another commit shares).
func (c Cache) has(repo, commit string, s Sibling) (bool, error) {
	entry := filepath.Join(c.SnapshotDir(repo, commit), filepath.FromSlash(s.Path))
	if fi, err := os.Stat(entry); err == nil && fi.Mode().IsRegular() && fi.Size() == s.Size {
		return true, nil
	}
	if s.Etag() == "" {
		return false, nil
	}
	if fi, err := os.Stat(c.blobPath(repo, s.Etag())); err != nil || !fi.Mode().IsRegular() || fi.Size() != s.Size {
		return false, nil
	}
	return true, c.link(repo, commit, s.Path, s.Etag())
}

// Snapshot is the folder of model repo at revision in the cache, without
// asking the Hub: it must hold config.json and safetensors weights (a
// model.safetensors.index.json or a .safetensors file), or the error is a
// *NotCachedError saying what is missing.
func (c Cache) Snapshot(repo, revision string) (string, error) {
	commit, err := c.Commit(repo, revision)
	if err != nil {
		return "", err
	}
	dir := c.SnapshotDir(repo, commit)
	missing := func(reason string) (string, error) {
		return "", &NotCachedError{Repo: repo, Revision: revision, Cache: c.Dir, Reason: reason}
	}
	if fi, err := os.Stat(filepath.Join(dir, "config.json")); err != nil || !fi.Mode().IsRegular() {
		return missing(fmt.Sprintf("snapshot %s has no config.json", commit))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}
	for _, e := range entries {
		if n := e.Name(); n == "model.safetensors.index.json" || strings.HasSuffix(n, ".safetensors") {
			return dir, nil
		}
	}
	return missing(fmt.Sprintf("snapshot %s has no safetensors weights", commit))
}

// NotCachedError is a model that is not (or not all) in the cache. Its
// message has no package prefix: it completes a message about the model
// path a user gave.
type NotCachedError struct {
	Repo, Revision, Cache, Reason string
}

func (e *NotCachedError) Error() string {
	return fmt.Sprintf("Hugging Face model %s (revision %s) is not in the cache %s: %s", e.Repo, e.Revision, e.Cache, e.Reason)
}
