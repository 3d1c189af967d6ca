package main

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/cuda"
)

// Without CUDA, asking for it fails with one line naming what was looked
// for and where, and exit status 1.
func TestDeviceCUDAWithoutGPU(t *testing.T) {
	if b, err := cuda.New(cuda.Options{}); err == nil {
		b.Close()
		t.Skip("a GPU is present: --device cuda works here")
	}
	for _, args := range [][]string{
		{"bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "8", "--steps", "1", "--device", "cuda"},
		{"bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "8", "--steps", "1", "--device", "cuda:1"},
	} {
		out, errs, code := memtrain(t, "", args...)
		if code != 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q", args, code, out)
		}
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "memtrain: cuda: ") ||
			!(strings.Contains(lines[0], "not found (looked in: $MEMTRAIN_CUDA_LIB_DIR") || strings.Contains(lines[0], "no CUDA device") ||
				strings.Contains(lines[0], "did not load")) {
			t.Errorf("%v: stderr %q, want one line saying what was looked for", args, errs)
		}
	}
	_, errs, code := memtrain(t, "", "bench", "step", "--preset", "tiny", "--device", "gpu")
	if code != 1 || strings.TrimSpace(errs) != `memtrain: --device "gpu": want cpu, cuda or cuda:N` {
		t.Errorf("--device gpu: exit %d, stderr %q", code, errs)
	}
}

// --device cpu is the default and changes nothing.
func TestDeviceCPU(t *testing.T) {
	out, errs, code := memtrain(t, "", "bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "8", "--steps", "1", "--device", "cpu")
	if code != 0 || !strings.Contains(out, `"tokens_per_s"`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
