package finetune

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/goldfish"
)

// TestChatMaskUnderGoldfish checks that the weights of a chat dataset's
// batches, as the trainer applies the goldfish mask to them
// (Run.microBatches), are the prompt mask times the goldfish keep mask:
// prompt targets stay out, goldfish drops among the assistant targets, and
// drops are counted only where the prompt mask kept the target.
func TestChatMaskUnderGoldfish(t *testing.T) {
	tok, files, err := data.OpenTokenizer("builtin:llama3")
	if err != nil {
		t.Fatal(err)
	}
	ct, err := data.NewChatTemplate(tok, files[tokenizer.ConfigFileName], data.ChatOptions{Now: time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "chat.jsonl")
	os.WriteFile(in, []byte(`{"messages":[{"role":"user","content":"Tell me a long story about a cat and a dog."},{"role":"assistant","content":"Once upon a time a cat and a dog lived in a small house by the river, and every morning they walked to the market together."}]}
{"instruction":"List three colours.","input":"","output":"Red, green and blue, which mix into every colour a screen shows."}
`), 0o644)
	ds := filepath.Join(dir, "ds")
	if _, err := data.Prepare(ds, []string{in}, tok, data.PrepareConfig{Mode: data.ModePack, SeqLen: 32, Chat: ct}); err != nil {
		t.Fatal(err)
	}
	s, err := data.OpenStore(ds)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := data.NewLoader(s, data.LoaderConfig{BatchSize: s.NumSequences(data.Train)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	m, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashTable, K: 2, H: 3})
	if err != nil {
		t.Fatal(err)
	}
	prompt := append([]float32(nil), b.Weights...)
	w := append([]float32(nil), b.Weights...)
	keep := make([]float32, len(w))
	T := b.T
	dropped, wantDropped, masked, kept := 0, 0, 0, 0
	for r := range b.B {
		dropped += m.Apply(b.Targets[r*T:(r+1)*T], w[r*T:(r+1)*T])
		m.Mask(b.Targets[r*T:(r+1)*T], keep[r*T:(r+1)*T])
	}
	for i := range w {
		if w[i] != prompt[i]*keep[i] {
			t.Fatalf("position %d: weight %v, want prompt %v × goldfish %v", i, w[i], prompt[i], keep[i])
		}
		if prompt[i] == 1 && keep[i] == 0 {
			wantDropped++
		}
		if prompt[i] == 0 {
			masked++
		} else {
			kept++
		}
	}
	if dropped != wantDropped || wantDropped == 0 || masked == 0 || kept <= wantDropped {
		t.Errorf("dropped %d, want %d (prompt-masked %d, assistant %d)", dropped, wantDropped, masked, kept)
	}
}
