package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

func Example() {
	// A directory with tokenizer.json and tokenizer_config.json, as in a
	// HuggingFace checkpoint. This one is a toy Llama 2 tokenizer.
	tok, err := tokenizer.Load("testdata/tiny")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("hello world", tokenizer.EncodeOptions{AddSpecial: true})
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids))
	fmt.Printf("%q\n", tok.DecodeSkipSpecial(ids))
	bos, _ := tok.BOS()
	eos, _ := tok.EOS()
	fmt.Println(tok.Family(), tok.VocabSize(), bos, eos)
	// Output:
	// [1 20 25]
	// "<s> hello world"
	// "hello world"
	// bpe/sentencepiece 26 1 2
}

func ExampleParse() {
	// The Llama 3 tokenizer that memtrain embeds.
	data, err := assets.Read(assets.Llama3Tokenizer)
	if err != nil {
		log.Fatal(err)
	}
	config, err := assets.Read(assets.Llama3TokenizerConfig)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := tokenizer.Parse("llama3/tokenizer.json", data, config)
	if err != nil {
		log.Fatal(err)
	}
	text := "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
	ids := tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true})
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids))
	fmt.Printf("%q\n", tok.DecodeSkipSpecial(ids))

	// With special-token text treated as text.
	fmt.Println(tok.Encode("<|eot_id|>", tokenizer.EncodeOptions{SplitSpecial: true}))
	// Output:
	// [128000 128006 882 128007 271 13347 0 128009]
	// "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
	// "user\n\nHi!"
	// [27 91 68 354 851 91 29]
}

func ExampleTokenizer_EncodeBatch() {
	tok, err := tokenizer.Load("testdata/tiny")
	if err != nil {
		log.Fatal(err)
	}
	// The results are in the order of the texts, whatever the number of
	// goroutines (0: GOMAXPROCS).
	batch := tok.EncodeBatch([]string{"hello", "world", "hello world"}, tokenizer.EncodeOptions{}, 0)
	fmt.Println(batch)
	// Output:
	// [[20] [25] [20 25]]
}
