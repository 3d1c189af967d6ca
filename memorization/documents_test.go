package memorization

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
)

func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("../data/testdata/tiny")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestParseProtocol(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prefixes []int
		suffix   int
		want     Protocol
		key      string
		err      string
	}{
		{name: "goldfish", want: Goldfish(50), key: "goldfish-50"},
		{name: "goldfish", suffix: 20, want: Goldfish(20), key: "goldfish-20"},
		{name: "pythia", want: Pythia(32, 32), key: "pythia-32-32"},
		{name: "carlini", want: Carlini([]int{8, 16, 32, 64}, 50), key: "carlini-8.16.32.64-50"},
		{name: "custom", prefixes: []int{16}, suffix: 32, want: Custom(16, 32), key: "custom-16-32"},
		{name: "goldfish", prefixes: []int{3}, err: "no prefix length"},
		{name: "custom", prefixes: []int{16}, err: "needs one prefix length and a suffix length"},
		{name: "pythia", prefixes: []int{1, 2}, err: "one prefix length"},
		{name: "carlini", prefixes: []int{-1}, err: "prefix length -1"},
		{name: "chat", want: Chat(0, 50), key: "chat-0-50"},
		{name: "chat", prefixes: []int{0}, want: Chat(0, 50), key: "chat-0-50"},
		{name: "chat", prefixes: []int{8}, suffix: 20, want: Chat(8, 20), key: "chat-8-20"},
		{name: "chat", prefixes: []int{1, 2}, err: "chat protocol: one answer prefix length, got 2"},
		{name: "chat", prefixes: []int{-1}, err: "chat protocol: answer prefix lengths [-1] (want one length ≥ 0)"},
		{name: "nope", err: `unknown protocol "nope" (want goldfish, pythia, carlini, custom or chat)`},
	} {
		p, err := ParseProtocol(tc.name, tc.prefixes, tc.suffix)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %v %d: error %v, want %q", tc.name, tc.prefixes, tc.suffix, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(p, tc.want) || p.Key() != tc.key {
			t.Errorf("%s: %+v %q %v, want %+v %q", tc.name, p, p.Key(), err, tc.want, tc.key)
		}
	}
}

func TestStoreAndFileDocuments(t *testing.T) {
	tok := tinyTokenizer(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	lines := `{"text":"hello world"}` + "\n" + `{"text":"world hello hello"}` + "\n" + `{"nope":1}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	docs, problems, err := FileDocuments([]string{in}, tok, true, data.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := tok.BOS()
	if len(docs) != 2 || problems.Total() != 1 {
		t.Fatalf("%d documents, %d problems", len(docs), problems.Total())
	}
	if want := []int32{bos, 20, 25}; !reflect.DeepEqual(docs[0].IDs, want) || !docs[0].Member || docs[0].Line != 1 || docs[1].Line != 2 {
		t.Errorf("document 0: %+v, want ids %v", docs[0], want)
	}
	if _, _, err := FileDocuments([]string{in}, tok, true, data.ReadOptions{Strict: true}); err == nil || !strings.Contains(err.Error(), "in.jsonl:3") {
		t.Errorf("strict: %v", err)
	}

	// A dataset with EOS: documents come back without it, split by split.
	out := filepath.Join(dir, "ds")
	if _, err := data.Prepare(out, []string{in}, tok, data.PrepareConfig{Mode: data.ModeDocument, SeqLen: 8, BOS: true, EOS: true, Holdout: 0.5, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	s, err := data.OpenStore(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := StoreDocuments(s, "both")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("%d documents", len(all))
	}
	members := 0
	for i, d := range all {
		if !reflect.DeepEqual(d.IDs, docs[i].IDs) {
			t.Errorf("document %d: %v, want %v", i, d.IDs, docs[i].IDs)
		}
		if d.Member {
			members++
		}
	}
	train, _ := StoreDocuments(s, "train")
	held, _ := StoreDocuments(s, "holdout")
	if len(train) != members || len(held) != 2-members {
		t.Errorf("train %d, holdout %d, members %d", len(train), len(held), members)
	}
	if _, err := StoreDocuments(s, "test"); err == nil {
		t.Error("unknown split accepted")
	}
}

func TestWriteResults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "eval")
	res := []DocResult{{Doc: 1, Member: true, Tokens: 9, Loss: 1.5, Probes: []Result{{Doc: 1, K: 4, Pred: []int32{1}, Suffix: []int32{1}, Exact: true, TokenMatch: 1}}}}
	s := Summarize(res, Pythia(4, 1), 20, Bootstrap{Resamples: 10, Seed: 1, Level: 0.95}, false)
	if err := WriteResults(dir, s, res); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSummary(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("summary round trip:\n%+v\n%+v", got, s)
	}
	b, err := os.ReadFile(filepath.Join(dir, "docs.jsonl"))
	if err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"exact":true`) {
		t.Errorf("docs.jsonl: %q %v", b, err)
	}
}

// TestChatDocuments: a chat dataset's documents carry their loss mask,
// less the EOS the dataset appended; the chat protocol's sources refuse a
// dataset without a mask, naming it, and input files.
func TestChatDocuments(t *testing.T) {
	dir := t.TempDir()
	info := data.TokenizerInfo{SHA256: "hand", VocabSize: 50, BOS: 1, EOS: 2}
	build := func(name string, chat bool) string {
		set := data.Settings{Mode: data.ModeDocument, SeqLen: 16, EOS: true}
		if chat {
			set.Chat = &data.ChatSettings{Template: "builtin:llama3", TemplateSHA256: "x"}
		}
		out := filepath.Join(dir, name)
		w, err := data.CreateStore(out, info, set)
		if err != nil {
			t.Fatal(err)
		}
		ids, mask := handChat()
		doc := data.Document{Source: "hand", Line: 1, IDs: ids, Split: data.Train}
		if chat {
			doc.Mask = mask
		}
		if _, err := w.Add(doc); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(nil, nil); err != nil {
			t.Fatal(err)
		}
		return out
	}
	chat, plain := build("chat", true), build("plain", false)
	docs, err := LoadDocuments(DocumentSource{Data: []string{chat}, Chat: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, mask := handChat()
	if len(docs) != 1 || !docs[0].Member || !reflect.DeepEqual(docs[0].IDs, ids) || !reflect.DeepEqual(docs[0].Mask, mask) {
		t.Fatalf("chat documents %+v, want ids %v mask %v", docs, ids, mask)
	}
	if docs, err := LoadDocuments(DocumentSource{Data: []string{plain}}, nil); err != nil || docs[0].Mask != nil {
		t.Errorf("plain documents %+v (%v): want no mask", docs, err)
	}
	_, err = LoadDocuments(DocumentSource{Data: []string{plain}, Chat: true}, nil)
	if want := "the chat protocol needs a chat dataset (memtrain data prepare --chat): " + plain + " has no loss mask"; err == nil || err.Error() != "memorization: "+want {
		t.Errorf("plain dataset for chat: %v, want %q", err, want)
	}
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"text":"hello"}`+"\n"), 0o644)
	if _, err := LoadDocuments(DocumentSource{Data: []string{in}, Chat: true}, tinyTokenizer(t)); err == nil || !strings.Contains(err.Error(), "not input files: "+in) {
		t.Errorf("input files for chat: %v", err)
	}
}
