package data

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/data/tokenizer"
)

const chatJSONL = `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}
{"instruction":"Translate to French.","input":"cat","output":"chat"}
{"messages":[]}
{"messages":[{"role":"bot","content":"x"},{"role":"assistant","content":"y"}]}
{"messages":[{"role":"user","content":7},{"role":"assistant","content":"y"}]}
{"messages":[{"content":"x"}]}
{"instruction":"Name a colour.","output":"Blue"}
`

func chatTemplate(t testing.TB, family string) (*ChatTemplate, *tokenizer.Tokenizer) {
	t.Helper()
	tok, files := chatTokenizer(t, family)
	ct, err := NewChatTemplate(tok, files[tokenizer.ConfigFileName], ChatOptions{Now: time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	return ct, tok
}

// TestPrepareChat prepares chat records (messages and alpaca, with bad
// records) and checks the documents, the mask behind the weights, the
// problems with their lines and the manifest.
func TestPrepareChat(t *testing.T) {
	for _, family := range []string{"llama3", "llama2"} {
		ct, tok := chatTemplate(t, family)
		in := writeFile(t, t.TempDir(), "chat.jsonl", chatJSONL)
		out := filepath.Join(t.TempDir(), "ds")
		m, err := Prepare(out, []string{in}, tok, PrepareConfig{Mode: ModeDocument, SeqLen: 256, Chat: ct, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != MaskedVersion || m.Settings.Chat == nil || m.Settings.Chat.Date != "2024-07-26" || m.Settings.Field != "" {
			t.Errorf("%s: version %d, settings %+v", family, m.Version, m.Settings)
		}
		wantLines := []int64{3, 4, 5, 6}
		var lines []int64
		for _, p := range m.Problems.Examples {
			lines = append(lines, p.Line)
		}
		if !slices.Equal(lines, wantLines) || m.Counts.Documents != 3 || m.Problems.Counts[BadChat] != 1 {
			t.Errorf("%s: problems %+v, documents %d", family, m.Problems, m.Counts.Documents)
		}
		s, err := OpenStore(out)
		if err != nil {
			t.Fatal(err)
		}
		recs := []string{strings.Split(chatJSONL, "\n")[0], strings.Split(chatJSONL, "\n")[1], strings.Split(chatJSONL, "\n")[6]}
		var masked int64
		for id, line := range recs {
			msgs, kind, _ := ParseChatRecord([]byte(line))
			if kind != "" {
				t.Fatal(kind)
			}
			ids, mask, err := ct.Encode(tok, msgs)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := s.DocTokens(id)
			if !slices.Equal(got, ids) {
				t.Errorf("%s: document %d = %v, want %v", family, id, got, ids)
			}
			T := s.SeqLen()
			qids, targets, weights := make([]int32, T), make([]int32, T), make([]float32, T)
			if _, err := s.Sequence(Train, id, qids, targets, weights); err != nil {
				t.Fatal(err)
			}
			for k := range T {
				want := float32(0)
				if k+1 < len(ids) {
					want = float32(mask[k+1])
					if mask[k+1] == 0 {
						masked++
					}
				}
				if weights[k] != want {
					t.Errorf("%s: document %d position %d: weight %v, want %v", family, id, k, weights[k], want)
				}
			}
		}
		if m.Counts.Masked != masked || masked == 0 {
			t.Errorf("%s: masked %d, want %d", family, m.Counts.Masked, masked)
		}
		s.Close()
	}
}

func TestPrepareChatErrors(t *testing.T) {
	ct, tok := chatTemplate(t, "llama3")
	dir := t.TempDir()
	in := writeFile(t, dir, "chat.jsonl", chatJSONL)
	// Strict: the first bad record, with its line.
	_, err := Prepare(filepath.Join(t.TempDir(), "ds"), []string{in}, tok, PrepareConfig{Mode: ModePack, SeqLen: 16, Chat: ct, Read: ReadOptions{Strict: true}})
	var re *RecordError
	if !errors.As(err, &re) || re.Problem.Line != 3 || !strings.Contains(err.Error(), "chat.jsonl:3: field \"messages\" is an empty array") {
		t.Errorf("strict: %v", err)
	}
	// A template that refuses the conversation: a bad-chat problem.
	ct2, tok2 := chatTemplate(t, "llama2")
	in2 := writeFile(t, dir, "order.jsonl", `{"messages":[{"role":"assistant","content":"first"},{"role":"user","content":"x"}]}
{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}
`)
	m, err := Prepare(filepath.Join(t.TempDir(), "ds"), []string{in2}, tok2, PrepareConfig{Mode: ModePack, SeqLen: 16, Chat: ct2})
	if err != nil {
		t.Fatal(err)
	}
	if m.Problems.Counts[BadChat] != 1 || m.Problems.Examples[0].Line != 1 || !strings.Contains(m.Problems.Examples[0].Detail, "roles must alternate") {
		t.Errorf("problems %+v", m.Problems)
	}
	for _, c := range []struct {
		cfg  PrepareConfig
		want string
	}{
		{PrepareConfig{SeqLen: 16, Chat: ct, BOS: true}, "writes its own BOS"},
		{PrepareConfig{SeqLen: 16, Chat: ct, SplitSpecial: true}, "cannot split special tokens"},
		{PrepareConfig{SeqLen: 16, Chat: ct, Read: ReadOptions{Field: "text"}}, `field "text": chat records have fixed fields`},
		{PrepareConfig{SeqLen: 16, Chat: ct, Read: ReadOptions{Format: Text}}, "text files hold no conversations"},
	} {
		if _, err := Prepare(filepath.Join(t.TempDir(), "ds"), []string{in}, tok, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

type pqMessage struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

type pqChat struct {
	Messages []pqMessage `parquet:"messages,list"`
	ID       int64       `parquet:"id"`
}

type pqAlpaca struct {
	Instruction string  `parquet:"instruction"`
	Input       *string `parquet:"input,optional"`
	Output      string  `parquet:"output"`
}

// TestPrepareChatParquet reads both chat formats from Parquet: the same
// documents as from JSONL, a bad row reported by its row number.
func TestPrepareChatParquet(t *testing.T) {
	ct, tok := chatTemplate(t, "llama3")
	dir := t.TempDir()
	input := "cat"
	chat := writeParquet(t, dir, "chat.parquet", []pqChat{
		{Messages: []pqMessage{{"user", "Hi"}, {"assistant", "Hello!"}}, ID: 1},
		{Messages: []pqMessage{{"robot", "Hi"}}, ID: 2},
	}, 1)
	alpaca := writeParquet(t, dir, "alpaca.parquet", []pqAlpaca{
		{Instruction: "Translate to French.", Input: &input, Output: "chat"},
		{Instruction: "Name a colour.", Output: "Blue"},
	}, 10)
	out := filepath.Join(t.TempDir(), "ds")
	m, err := Prepare(out, []string{chat, alpaca}, tok, PrepareConfig{Mode: ModeDocument, SeqLen: 64, Chat: ct})
	if err != nil {
		t.Fatal(err)
	}
	if m.Counts.Documents != 3 || m.Problems.Total() != 1 || m.Problems.Examples[0].Where() != chat+": row 2" {
		t.Fatalf("documents %d, problems %+v", m.Counts.Documents, m.Problems)
	}
	s, err := OpenStore(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, line := range []string{
		`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}`,
		`{"instruction":"Translate to French.","input":"cat","output":"chat"}`,
		`{"instruction":"Name a colour.","output":"Blue"}`,
	} {
		msgs, _, _ := ParseChatRecord([]byte(line))
		want, _, err := ct.Encode(tok, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := s.DocTokens(id); !slices.Equal(got, want) {
			t.Errorf("document %d = %v, want %v", id, got, want)
		}
	}
}
