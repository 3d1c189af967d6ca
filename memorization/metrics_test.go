package memorization

import (
	"math"
	"reflect"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestExactMatch(t *testing.T) {
	tests := []struct {
		name        string
		pred, truth []int32
		want        bool
	}{
		{"both empty", nil, nil, true},
		{"equal", []int32{1, 2, 3}, []int32{1, 2, 3}, true},
		{"one differs", []int32{1, 2, 4}, []int32{1, 2, 3}, false},
		{"pred shorter", []int32{1, 2}, []int32{1, 2, 3}, false},
		{"pred longer", []int32{1, 2, 3, 4}, []int32{1, 2, 3}, false},
		{"empty pred", nil, []int32{1}, false},
	}
	for _, tt := range tests {
		if got := ExactMatch(tt.pred, tt.truth); got != tt.want {
			t.Errorf("%s: ExactMatch = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTokenMatch(t *testing.T) {
	tests := []struct {
		name        string
		pred, truth []int32
		want        float64
	}{
		{"empty truth", []int32{1}, nil, 0},
		{"both empty", nil, nil, 0},
		{"all match", []int32{1, 2, 3, 4}, []int32{1, 2, 3, 4}, 1},
		{"half", []int32{1, 9, 3, 9}, []int32{1, 2, 3, 4}, 0.5},
		{"short pred counts missing as wrong", []int32{1, 2}, []int32{1, 2, 3, 4}, 0.5},
		{"long pred extra ignored", []int32{1, 2, 3, 4, 5, 6}, []int32{1, 2, 3, 4}, 1},
		{"empty pred", nil, []int32{1, 2}, 0},
		{"no positional overlap", []int32{2, 1}, []int32{1, 2}, 0},
	}
	for _, tt := range tests {
		if got := TokenMatch(tt.pred, tt.truth); got != tt.want {
			t.Errorf("%s: TokenMatch = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPrefixMatch(t *testing.T) {
	tests := []struct {
		name        string
		pred, truth []int32
		want        int
	}{
		{"both empty", nil, nil, 0},
		{"equal", []int32{1, 2, 3}, []int32{1, 2, 3}, 3},
		{"first differs", []int32{9, 2, 3}, []int32{1, 2, 3}, 0},
		{"middle differs", []int32{1, 2, 9, 4}, []int32{1, 2, 3, 4}, 2},
		{"pred shorter", []int32{1, 2}, []int32{1, 2, 3}, 2},
		{"pred longer", []int32{1, 2, 3, 4}, []int32{1, 2, 3}, 3},
	}
	for _, tt := range tests {
		if got := PrefixMatch(tt.pred, tt.truth); got != tt.want {
			t.Errorf("%s: PrefixMatch = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLCSLen(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 0},
		{"", "abc", 0},
		{"abc", "abc", 3},
		{"abcbdab", "bdcaba", 4}, // CLRS example
		{"AGGTAB", "GXTXAYB", 4},
		{"abc", "def", 0},
		{"a", "aaaa", 1},
	}
	for _, tt := range tests {
		a, b := []byte(tt.a), []byte(tt.b)
		if got := lcsLen(a, b); got != tt.want {
			t.Errorf("lcsLen(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := lcsLen(b, a); got != tt.want {
			t.Errorf("lcsLen(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestRougeTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   \t\n", nil},
		{"!!! ...", nil},
		{"The quick brown dog jumps on the log.", []string{"the", "quick", "brown", "dog", "jumps", "on", "the", "log"}},
		{"Hello, WORLD!", []string{"hello", "world"}},
		{"don't stop-me now", []string{"don", "t", "stop", "me", "now"}},
		{"GPT-2 has 1.5B params", []string{"gpt", "2", "has", "1", "5b", "params"}},
		{"café naïve", []string{"caf", "na", "ve"}},
		{"under_score", []string{"under", "score"}},
		{"\u212Aelvin", []string{"kelvin"}},         // Kelvin sign lower-cases to k
		{"\u0130stanbul", []string{"i", "stanbul"}}, // as Python: "i\u0307stanbul"
		{"ＡＢＣ", nil}, // full-width letters stay non-ASCII
	}
	for _, tt := range tests {
		got := RougeTokenize(tt.in)
		if len(got) == 0 && len(tt.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("RougeTokenize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRougeLText(t *testing.T) {
	tests := []struct {
		name        string
		pred, truth string
		p, r, f     float64
	}{
		{
			// rouge_score's README example.
			name:  "rouge_score example",
			pred:  "The quick brown dog jumps on the log.",
			truth: "The quick brown fox jumps over the lazy dog",
			p:     0.625, r: 0.5556, f: 0.5882,
		},
		{"identical", "a b c", "a b c", 1, 1, 1},
		{"case and punctuation ignored", "HELLO, world!!", "hello world", 1, 1, 1},
		{"disjoint", "a b", "c d", 0, 0, 0},
		{"empty pred", "", "a b", 0, 0, 0},
		{"empty truth", "a b", "", 0, 0, 0},
		{"both empty", "", "", 0, 0, 0},
		{"punctuation only", "?!", "a", 0, 0, 0},
		// LCS(a b c d, a c e) = "a c" = 2; P = 2/4, R = 2/3, F = 4/7.
		{"subsequence", "a b c d", "a c e", 0.5, 2.0 / 3, 4.0 / 7},
		// Reversal: LCS = 1; P = R = F = 1/3.
		{"reversed", "c b a", "a b c", 1.0 / 3, 1.0 / 3, 1.0 / 3},
		// Repeated tokens: LCS(the the the, the cat) = 1; P = 1/3, R = 1/2, F = 0.4.
		{"repeats", "the the the", "the cat", 1.0 / 3, 0.5, 0.4},
	}
	for _, tt := range tests {
		p, r, f := RougeLText(tt.pred, tt.truth)
		if err := numtest.Close([]float64{p, r, f}, []float64{tt.p, tt.r, tt.f}, numtest.Tol{Abs: 1e-4}); err != nil {
			t.Errorf("%s: RougeLText (P, R, F): %v", tt.name, err)
		}
	}
}

func TestRougeLGeneric(t *testing.T) {
	p, r, f := RougeL([]string{"x", "y", "z"}, []string{"x", "z"})
	if err := numtest.Close([]float64{p, r, f}, []float64{2.0 / 3, 1, 0.8}, numtest.Tol{Abs: 1e-4}); err != nil {
		t.Errorf("RougeL (P, R, F): %v", err)
	}
	p, r, f = RougeLIDs([]int32{5, 1, 2, 3}, []int32{1, 2, 3, 4, 5, 6})
	// LCS = 1 2 3; P = 3/4, R = 1/2, F = 0.6.
	if err := numtest.Close([]float64{p, r, f}, []float64{0.75, 0.5, 0.6}, numtest.Tol{Abs: 1e-4}); err != nil {
		t.Errorf("RougeLIDs (P, R, F): %v", err)
	}
	p, r, f = RougeLIDs(nil, nil)
	if p != 0 || r != 0 || f != 0 {
		t.Errorf("RougeLIDs(nil, nil) = (%v, %v, %v), want zeros", p, r, f)
	}
}

func TestZlibRatio(t *testing.T) {
	if n := ZlibLen(""); n <= 0 {
		t.Fatalf("ZlibLen(\"\") = %d, want > 0", n)
	}
	if got := ZlibRatio(2.5, ""); math.IsNaN(got) || math.IsInf(got, 0) {
		t.Errorf("ZlibRatio on empty text = %v", got)
	}
	text := "The quick brown fox jumps over the lazy dog."
	n := ZlibLen(text)
	if got, want := ZlibRatio(3, text), 3/float64(n); got != want {
		t.Errorf("ZlibRatio = %v, want %v", got, want)
	}
	// Repetitive text compresses better than varied text of the same length.
	rep := ""
	for range 30 {
		rep += "ab"
	}
	varied := "q8Zx1LmT0pR7vKs2NwY4bH9cJ6dF3gE5aU0iO8eW1rT2yQ3uI4oP5lK6jH7gF8dS"[:len(rep)]
	if ZlibLen(rep) >= ZlibLen(varied) {
		t.Errorf("ZlibLen(repetitive)=%d >= ZlibLen(varied)=%d", ZlibLen(rep), ZlibLen(varied))
	}
	if !(ZlibRatio(1, rep) > ZlibRatio(1, varied)) {
		t.Errorf("same loss should score higher on more compressible text")
	}
}

func TestMinKProb(t *testing.T) {
	lp := []float64{-0.1, -5, -0.2, -3, -0.3, -4, -0.4, -2, -0.5, -1}
	tests := []struct {
		name string
		in   []float64
		k    float64
		want float64
	}{
		{"empty", nil, 20, 0},
		{"20% of 10 -> 2 lowest", lp, 20, -4.5},
		{"30% of 10 -> 3 lowest", lp, 30, -4},
		{"100% is the mean", lp, 100, -1.65},
		{"over 100 clamps", lp, 250, -1.65},
		{"zero k uses one token", lp, 0, -5},
		{"negative k uses one token", lp, -10, -5},
		{"tiny k rounds up to one token", lp, 1, -5},
		{"single token", []float64{-2.5}, 20, -2.5},
		{"floor: 25% of 10 -> 2", lp, 25, -4.5},
		{"ties", []float64{-1, -1, -1, -1}, 50, -1},
	}
	for _, tt := range tests {
		if err := numtest.Scalar(MinKProb(tt.in, tt.k), tt.want, numtest.Tol{Abs: 1e-4}); err != nil {
			t.Errorf("%s: MinKProb: %v", tt.name, err)
		}
	}
	orig := append([]float64(nil), lp...)
	MinKProb(lp, 50)
	if !reflect.DeepEqual(orig, lp) {
		t.Errorf("MinKProb modified its input")
	}
}
