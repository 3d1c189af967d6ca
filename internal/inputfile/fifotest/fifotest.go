//go:build unix

// Package fifotest makes named pipes for the tests that check that
// nothing opens one (an open of a pipe without a writer blocks for ever),
// and fails such a test rather than letting it hang.
package fifotest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Make makes a named pipe at path (removing what is there), or skips the
// test where the file system cannot hold one.
func Make(t testing.TB, path string) string {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

// Within runs fn and returns its error, failing the test if fn has not
// returned after a few seconds (blocked on a named pipe).
func Within(t testing.TB, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("blocked: a named pipe was opened")
		return nil
	}
}
