package finetune

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestLock: a folder is locked once; the second locker learns who holds
// it; the lock is free again once released.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	var le *LockedError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want a LockedError naming this process", err)
	}
	unlock()
	unlock2, err := Lock(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	unlock2()
}

// TestExistingRun: a folder with a run's files holds a run, with its last
// step and loss; an empty one or one with other files does not.
func TestExistingRun(t *testing.T) {
	dir := t.TempDir()
	if e := existingRun(dir); e != nil {
		t.Errorf("an empty folder holds %v", e)
	}
	os.WriteFile(dir+"/notes.txt", []byte("mine"), 0o644)
	os.WriteFile(dir+"/"+LockFile, []byte("pid 1"), 0o644)
	if e := existingRun(dir); e != nil {
		t.Errorf("a folder of other files holds %v", e)
	}
	os.WriteFile(dir+"/"+MetricsFile, []byte(`{"step":1,"loss":3.5}`+"\n"+`{"step":2,"loss":2.25}`+"\n"+`{"step":3,`), 0o644)
	e := existingRun(dir)
	if e == nil || e.Step != 2 || e.Loss != 2.25 {
		t.Fatalf("existingRun = %+v, want step 2, loss 2.25", e)
	}
	if err := replaceRun(dir); err != nil {
		t.Fatal(err)
	}
	if e := existingRun(dir); e != nil {
		t.Errorf("after replaceRun: %+v", e)
	}
	if _, err := os.Stat(dir + "/notes.txt"); err != nil {
		t.Error("replaceRun removed the user's file")
	}
}
