package data

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestStaleTemporaries: a writer killed before it committed left its
// temporary folder (.OUT.tmp-*) forever; the next writer of the same
// dataset removes those that no live writer holds — and nothing else:
// not a live writer's (locked), not a fresh one without a lock, not
// another dataset's, not a name CreateStore does not make.
func TestStaleTemporaries(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no advisory locks: temporaries are kept")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "ds")
	mk := func(name string, lock bool, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, TokensFile), []byte("partial"), 0o644)
		if lock {
			os.WriteFile(filepath.Join(p, tempLockFile), nil, 0o644)
		}
		if age > 0 {
			old := time.Now().Add(-age)
			os.Chtimes(p, old, old)
		}
		return p
	}
	mk(".ds.tmp-123", true, 0)          // its writer killed: the lock file, unlocked
	mk(".ds.tmp-456", false, time.Hour) // an old release's, killed: no lock file, old
	mk(".ds.tmp-789", false, 0)         // a writer that has not locked yet
	mk(".ds.tmp-12x", true, 0)          // not a name CreateStore makes
	mk(".other.tmp-1", true, 0)         // another dataset's
	mk("ds.tmp-5", true, 0)             // not hidden: not CreateStore's
	// A live writer of the same dataset, in another process as far as
	// the lock goes (a lock is its open file's).
	live, err := CreateStore(out, handTok, Settings{Mode: ModeDocument, SeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	liveTmp := filepath.Base(live.tmp)
	// A writer killed: its lock released (as the kernel does when the
	// process dies), its folder left.
	killed, err := CreateStore(filepath.Join(dir, "ds2"), handTok, Settings{Mode: ModeDocument, SeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	killedTmp := filepath.Base(killed.tmp)
	killed.lock.Close()
	killed.f.Close()

	names := func() []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	// The next writer of ds removes ds's stale temporaries, not the live
	// writer's.
	w, err := CreateStore(out+"/", handTok, Settings{Mode: ModeDocument, SeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Base(w.tmp)
	got := names()
	for _, gone := range []string{".ds.tmp-123", ".ds.tmp-456"} {
		if slices.Contains(got, gone) {
			t.Errorf("%s kept: %v", gone, got)
		}
	}
	for _, kept := range []string{".ds.tmp-789", ".ds.tmp-12x", ".other.tmp-1", "ds.tmp-5", liveTmp, killedTmp, mine} {
		if !slices.Contains(got, kept) {
			t.Errorf("%s removed: %v", kept, got)
		}
	}
	w.Abort()
	live.Abort()
	// The killed writer's dataset, written again, loses its temporary;
	// the committed dataset holds no lock file.
	w2, err := CreateStore(filepath.Join(dir, "ds2"), handTok, Settings{Mode: ModeDocument, SeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Add(Document{IDs: []int32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := names(); slices.Contains(got, killedTmp) {
		t.Errorf("%s kept: %v", killedTmp, got)
	}
	if _, err := os.Stat(filepath.Join(dir, "ds2", tempLockFile)); err == nil {
		t.Error("the committed dataset holds the writer's lock file")
	}
	if _, err := OpenStore(filepath.Join(dir, "ds2")); err != nil {
		t.Error(err)
	}
}
