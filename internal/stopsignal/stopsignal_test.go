//go:build unix

package stopsignal

import (
	"bytes"
	"syscall"
	"testing"
	"time"
)

// TestWatch: the first signal is a request, remembered with its exit
// status; nothing is requested before it.
func TestWatch(t *testing.T) {
	var log bytes.Buffer
	w := Start(&log)
	defer w.Stop()
	if w.Requested() || w.Signal() != nil {
		t.Fatal("a stop requested before any signal")
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	for deadline := time.Now().Add(5 * time.Second); !w.Requested(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SIGUSR1 did not request a stop")
		}
	}
	if w.Signal() != syscall.SIGUSR1 || Exit(w.Signal()) != 138 {
		t.Errorf("signal %v, exit %d; want SIGUSR1, 138", w.Signal(), Exit(w.Signal()))
	}
	for sig, code := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		if Exit(sig) != code {
			t.Errorf("Exit(%v) = %d, want %d", sig, Exit(sig), code)
		}
	}
}
