//go:build unix

package hub

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints/hub/hubtest"
)

// While another program (huggingface_hub, through its .locks file) holds a
// blob's lock, a download waits; a blob that program finished is then used
// without a request for its bytes.
func TestBlobLock(t *testing.T) {
	srv := hubtest.New(t, testRepo())
	cache := Cache{Dir: t.TempDir()}
	c := loopbackClient(t, srv, "")
	shard := fileOf(t, repoFiles(2), "model-00001-of-00002.safetensors")
	p, err := c.Plan(context.Background(), cache, repoID, Options{Files: []string{shard.Path}})
	if err != nil {
		t.Fatal(err)
	}
	etag := hubtest.Etag(shard)
	if _, err := os.Stat(filepath.Join(cache.Dir, ".locks", "models--acme--tiny-llama", etag+".lock")); err == nil {
		t.Fatal("a lock file before any download")
	}
	unlock, err := cache.lockBlob(context.Background(), repoID, etag)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- c.Download(context.Background(), p, 1, nil) }()
	// The other program finishes the blob, then lets go. (The pause gives
	// a download that ignored the lock the time to fetch, and fail the
	// test; one that waits passes whatever the pause.)
	time.Sleep(300 * time.Millisecond)
	os.MkdirAll(filepath.Dir(cache.blobPath(repoID, etag)), 0o755)
	if err := os.WriteFile(cache.blobPath(repoID, etag), shard.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := hubtest.ByteRequests(srv.Requests()); n != 0 {
		t.Errorf("%d byte requests for a blob another program wrote", n)
	}
	checkSnapshot(t, cache, commit2, repoFiles(2), []string{shard.Path})
}
