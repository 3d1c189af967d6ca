package memorization

import (
	"math"
	"strings"
	"testing"
)

// TestCountBounds: the counts an evaluation takes from a user are bounded
// before anything is sized from them: bootstrap resamples (10⁹ asked for
// 8 GB at once), sampled continuations a probe (listed up front, they
// grew without end) and a protocol's lengths (whose sum overflowed).
func TestCountBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"resamples", (&EvalConfig{Bootstrap: Bootstrap{Resamples: 1_000_000_000}}).check(), "memorization: resamples 1000000000: want 0 (1,000) to 100000"},
		{"samples", SampleConfig{Samples: math.MaxInt, Temperature: 1}.Check(), "samples 9223372036854775807: want 0 (greedy only) to 100000"},
		{"evaluation's samples", (&EvalConfig{Sampling: SampleConfig{Samples: MaxSamples + 1, Temperature: 1}}).check(), "memorization: samples 100001"},
		{"suffix", func() error { _, err := ParseProtocol("goldfish", nil, math.MaxInt); return err }(), "goldfish protocol: suffix length 9223372036854775807 (want 1 to 16777216)"},
		{"prefix", func() error { _, err := ParseProtocol("carlini", []int{8, math.MaxInt}, 50); return err }(), "carlini protocol: prefix length 9223372036854775807 (want at most 16777216)"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
	for _, ok := range []error{
		(&EvalConfig{Bootstrap: Bootstrap{Resamples: MaxResamples}}).check(),
		SampleConfig{Samples: MaxSamples, Temperature: 1}.Check(),
		func() error { _, err := ParseProtocol("custom", []int{MaxLength}, MaxLength); return err }(),
	} {
		if ok != nil {
			t.Errorf("at the bound: %v", ok)
		}
	}
}
