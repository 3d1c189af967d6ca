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
