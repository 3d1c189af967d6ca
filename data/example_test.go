package data_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
)

func Example() {
	dir, err := os.MkdirTemp("", "data-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	corpus := filepath.Join(dir, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"text": "hello world"}
{"text": 42}
{"text": "hello hello world"}
`), 0o644)

	// Tokenize into a dataset: one sequence per document, 4 positions,
	// BOS (1) and EOS (2) around each document.
	tok, err := tokenizer.Load("testdata/tiny")
	if err != nil {
		log.Fatal(err)
	}
	out := filepath.Join(dir, "dataset")
	m, err := data.Prepare(out, []string{corpus}, tok, data.PrepareConfig{
		Mode: data.ModeDocument, SeqLen: 4, BOS: true, EOS: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("documents", m.Counts.Documents, "tokens", m.Counts.Tokens, "sequences", m.Counts.Sequences)
	fmt.Println("problem:", m.Problems.Examples[0].Kind)

	// Batches of two sequences.
	store, err := data.OpenStore(out)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	loader, err := data.NewLoader(store, data.LoaderConfig{BatchSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	b, err := loader.Next()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ids    ", b.IDs)
	fmt.Println("targets", b.Targets)
	fmt.Println("weights", b.Weights)
	fmt.Println("next position", loader.Position())
	// Output:
	// documents 2 tokens 9 sequences 2
	// problem: wrong-type
	// ids     [1 20 25 2 1 20 20 25]
	// targets [20 25 2 2 20 20 25 2]
	// weights [1 1 1 0 1 1 1 1]
	// next position 2
}

// A training run saves the loader's position with its checkpoint and
// restores it on resume: the batches continue exactly where they stopped.
func ExampleLoader_SetPosition() {
	dir, err := os.MkdirTemp("", "data-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	corpus := filepath.Join(dir, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"text": "hello"}
{"text": "world"}
{"text": "hello world"}
{"text": "world hello"}
`), 0o644)
	tok, err := tokenizer.Load("testdata/tiny")
	if err != nil {
		log.Fatal(err)
	}
	out := filepath.Join(dir, "dataset")
	if _, err := data.Prepare(out, []string{corpus}, tok, data.PrepareConfig{Mode: data.ModeDocument, SeqLen: 3, BOS: true}); err != nil {
		log.Fatal(err)
	}
	store, err := data.OpenStore(out)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	cfg := data.LoaderConfig{BatchSize: 2, Shuffle: true, Seed: 7}

	run, _ := data.NewLoader(store, cfg)
	for range 3 {
		run.Next()
	}
	saved := run.Position() // saved with a checkpoint
	want, _ := run.Next()

	resumed, _ := data.NewLoader(store, cfg)
	resumed.SetPosition(saved)
	got, _ := resumed.Next()
	fmt.Println("saved position", saved)
	fmt.Println("epoch", got.Epoch, "documents", got.DocIDs, "same as uninterrupted:", fmt.Sprint(got) == fmt.Sprint(want))
	// Output:
	// saved position 6
	// epoch 1 documents [3 2] same as uninterrupted: true
}
