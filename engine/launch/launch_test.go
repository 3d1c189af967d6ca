package launch

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
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
