//go:build unix

package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadNamedPipe: a tokenizer.json or tokenizer_config.json that is a
// named pipe is refused by name, not opened (which would block).
func TestLoadNamedPipe(t *testing.T) {
	for _, name := range []string{FileName, ConfigFileName} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, FileName), []byte(minimal(okModel)), 0o644)
			fifo := filepath.Join(dir, name)
			os.Remove(fifo)
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			done := make(chan error, 1)
			go func() { _, err := Load(dir); done <- err }()
			select {
			case err := <-done:
				if want := "tokenizer: " + fifo + ": not a regular file (a named pipe)"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Load: %v, want %q", err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("blocked: a named pipe was opened")
			}
		})
	}
}
