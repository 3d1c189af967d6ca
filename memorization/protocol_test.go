package memorization

import (
	"slices"
	"testing"
)

func seq(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(i)
	}
	return s
}

func TestProtocols(t *testing.T) {
	tests := []struct {
		name string
		p    Protocol
		doc  []int32
		want [][2]int // (prefix length, suffix length) per probe
		k    []int
	}{
		{"goldfish short skipped", Goldfish(50), seq(50), nil, nil},
		{"goldfish 51", Goldfish(50), seq(51), [][2]int{{1, 50}}, []int{1}},
		{"goldfish long truncated", Goldfish(50), seq(3000), [][2]int{{1998, 50}}, []int{1998}},
		{"pythia", Pythia(32, 32), seq(100), [][2]int{{32, 32}}, []int{32}},
		{"pythia short", Pythia(32, 32), seq(63), nil, nil},
		{"carlini", Carlini([]int{10, 50, 100}, 50), seq(120), [][2]int{{10, 50}, {50, 50}}, []int{10, 50}},
		{"custom", Custom(5, 3), seq(8), [][2]int{{5, 3}}, []int{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatal(err)
			}
			probes := tt.p.Probes(7, tt.doc)
			if len(probes) != len(tt.want) {
				t.Fatalf("%d probes, want %d", len(probes), len(tt.want))
			}
			for i, pr := range probes {
				if len(pr.Prefix) != tt.want[i][0] || len(pr.Suffix) != tt.want[i][1] || pr.K != tt.k[i] || pr.Doc != 7 {
					t.Errorf("probe %d: prefix %d suffix %d k %d", i, len(pr.Prefix), len(pr.Suffix), pr.K)
				}
				// The suffix follows the prefix in the document.
				if whole := append(slices.Clone(pr.Prefix), pr.Suffix...); !slices.Equal(whole, tt.doc[:len(whole)]) {
					t.Errorf("probe %d is not a prefix of the document", i)
				}
			}
		})
	}
	for _, bad := range []Protocol{{Name: "zlib", SuffixLen: 1}, Pythia(0, 32), Custom(4, 0), {Name: "carlini", SuffixLen: 50}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
