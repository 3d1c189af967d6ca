package launch

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

func TestParseDevice(t *testing.T) {
	for in, want := range map[string]engine.Device{
		"cpu":     {Kind: engine.CPU},
		"cuda":    {Kind: engine.CUDA},
		"cuda:0":  {Kind: engine.CUDA},
		"cuda:3":  {Kind: engine.CUDA, Index: 3},
		"cuda:12": {Kind: engine.CUDA, Index: 12},
	} {
		if got, err := ParseDevice(in); err != nil || got != want {
			t.Errorf("ParseDevice(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda0", "cpu:0"} {
		if _, err := ParseDevice(in); err == nil || !strings.Contains(err.Error(), "want cpu, cuda or cuda:N") {
			t.Errorf("ParseDevice(%q): %v", in, err)
		}
	}
}

func TestParseOverlap(t *testing.T) {
	for in, want := range map[string]parallel.Overlap{
		"oar,ors,oag": parallel.AllOverlap(),
		"none":        {},
		"":            {},
		"OAR, oag":    {AllReduce: true, AllGather: true},
		"ors":         {ReduceScatter: true},
	} {
		if got, err := ParseOverlap(in); err != nil || got != want {
			t.Errorf("ParseOverlap(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"oar,fast": `unknown "fast"`,
		"oar,,ors": `list "oar,,ors": item 2 of 3 is empty`,
		"oag,":     "item 2 of 2 is empty",
	} {
		if _, err := ParseOverlap(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOverlap(%q): %v, want an error with %q", in, err, want)
		}
	}
}

// TestNegativeThreads: a negative thread count is refused by every way in,
// not taken for all cores.
func TestNegativeThreads(t *testing.T) {
	const want = "launch: threads -2: want 0 (all cores) or more"
	if _, err := New(Spec{Threads: -2}); err == nil || err.Error() != want {
		t.Errorf("New: %v, want %q", err, want)
	}
	if _, err := New(Spec{Threads: -2, Grid: comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}}); err == nil || err.Error() != want {
		t.Errorf("New on a grid: %v, want %q", err, want)
	}
	if _, _, err := NewBackend(engine.Device{Kind: engine.CPU}, -2, "go"); err == nil || err.Error() != want {
		t.Errorf("NewBackend: %v, want %q", err, want)
	}
	for _, n := range []int{0, 1, 64} {
		if err := CheckThreads(n); err != nil {
			t.Errorf("CheckThreads(%d): %v", n, err)
		}
	}
}
