package tokenizer

import (
	"fmt"
	"testing"
)

func benchmarkAusten(b *testing.B, tok *Tokenizer) {
	texts := austen(b)
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				tok.EncodeBatch(texts, EncodeOptions{}, threads)
			}
		})
	}
}

// BenchmarkEncodeLlama3Austen encodes the whole Austen corpus with Llama 3.
func BenchmarkEncodeLlama3Austen(b *testing.B) { benchmarkAusten(b, llama3(b)) }

// BenchmarkEncodeLlama2Austen encodes the whole Austen corpus with Llama 2.
func BenchmarkEncodeLlama2Austen(b *testing.B) { benchmarkAusten(b, llama2(b)) }

func BenchmarkLoadLlama3(b *testing.B) {
	data, cfg := llama3Files(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("llama3", data, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeLlama3Austen(b *testing.B) {
	tok := llama3(b)
	texts := austen(b)
	ids := tok.EncodeBatch(texts, EncodeOptions{}, 0)
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	b.SetBytes(int64(n))
	for b.Loop() {
		for _, x := range ids {
			tok.Decode(x)
		}
	}
}

// BenchmarkEncodeQwen2Austen encodes the whole Austen corpus with the
// tokenizer of testdata/qwen2, whose Split runs on the general regex path
// (regexp2).
func BenchmarkEncodeQwen2Austen(b *testing.B) { benchmarkAusten(b, qwen2(b)) }

// BenchmarkSplitAusten pre-tokenizes the Austen corpus: Llama 3's pattern
// by the hand-written splitter and on regexp2, and Qwen's on regexp2.
func BenchmarkSplitAusten(b *testing.B) {
	texts := austen(b)
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	llama3Re, err := compileRegex(llama3Pattern, "llama3")
	if err != nil {
		b.Fatal(err)
	}
	qwen2Re, err := compileRegex(readRegexGoldenPattern(b, "qwen2"), "qwen2")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		find func(dst []match, s string) ([]match, error)
	}{
		{"llama3/hand-written", (&pattern{llama3: true}).appendMatches},
		{"llama3/regexp2", llama3Re.regexpMatches},
		{"qwen2/regexp2", qwen2Re.regexpMatches},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(n))
			var ms []match
			for b.Loop() {
				for _, s := range texts {
					if ms, err = c.find(ms[:0], s); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// readRegexGoldenPattern returns the pattern of that name in the golden file.
func readRegexGoldenPattern(tb testing.TB, name string) string {
	for _, p := range readRegexGolden(tb).Patterns {
		if p.Name == name {
			return p.Pattern
		}
	}
	tb.Fatalf("no pattern %s in the golden file", name)
	return ""
}
