package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// chatGolden is data/testdata/chat/golden.json, written by
// scripts/chatgolden/gen.py with Python's Jinja2 as HF apply_chat_template
// renders: the rendered strings. Equal strings tokenize to equal ids, since
// memtrain's tokenizer is proven equal to HF's (data/tokenizer's golden
// tests); the test checks the ids of both anyway.
type chatGolden struct {
	Now       string            `json:"now"`
	Templates map[string]string `json:"templates"`
	Cases     []struct {
		Template     string    `json:"template"`
		Conversation string    `json:"conversation"`
		Messages     []Message `json:"messages"`
		Gen          bool      `json:"add_generation_prompt"`
		Rendered     *string   `json:"rendered"`
		Error        *string   `json:"error"`
	} `json:"cases"`
}

func readChatGolden(t *testing.T) *chatGolden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "chat", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g chatGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

var chatToks = struct {
	sync.Mutex
	m map[string]*tokenizer.Tokenizer
	f map[string]map[string][]byte
}{m: map[string]*tokenizer.Tokenizer{}, f: map[string]map[string][]byte{}}

// chatTokenizer returns builtin:NAME and its files.
func chatTokenizer(t testing.TB, name string) (*tokenizer.Tokenizer, map[string][]byte) {
	t.Helper()
	chatToks.Lock()
	defer chatToks.Unlock()
	if tok, ok := chatToks.m[name]; ok {
		return tok, chatToks.f[name]
	}
	tok, files, err := OpenTokenizer("builtin:" + name)
	if err != nil {
		t.Fatal(err)
	}
	chatToks.m[name], chatToks.f[name] = tok, files
	return tok, files
}

// goldenTemplate returns the template of a golden case's name.
func goldenTemplate(t *testing.T, g *chatGolden, name string) (*ChatTemplate, *tokenizer.Tokenizer) {
	t.Helper()
	now, err := time.Parse("2006-01-02T15:04:05", g.Now)
	if err != nil {
		t.Fatal(err)
	}
	family, opt := "llama3", ChatOptions{Now: now}
	switch name {
	case "config:llama3":
	case "builtin:llama2":
		family, opt.Template = "llama2", name
	case "builtin:llama3":
		opt.Template = name
	default:
		opt.Template = g.Templates[name]
	}
	tok, files := chatTokenizer(t, family)
	ct, err := NewChatTemplate(tok, files[tokenizer.ConfigFileName], opt)
	if err != nil {
		t.Fatal(err)
	}
	if ct.Source != g.Templates[name] {
		t.Fatalf("%s: the template differs from the generator's", name)
	}
	return ct, tok
}

func TestChatTemplateGolden(t *testing.T) {
	g := readChatGolden(t)
	if len(g.Cases) < 80 {
		t.Fatalf("%d golden cases", len(g.Cases))
	}
	for _, c := range g.Cases {
		ct, tok := goldenTemplate(t, g, c.Template)
		got, err := ct.Render(c.Messages, c.Gen)
		name := c.Template + "/" + c.Conversation
		if c.Gen {
			name += "/gen"
		}
		if c.Error != nil {
			if err == nil || !strings.Contains(err.Error(), *c.Error) {
				t.Errorf("%s: error %v, want %q", name, err, *c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != *c.Rendered {
			t.Errorf("%s: rendered\n%q\nwant (Jinja2)\n%q", name, got, *c.Rendered)
			continue
		}
		if c.Gen {
			continue
		}
		ids, mask, err := ct.Encode(tok, c.Messages)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := tok.Encode(*c.Rendered, tokenizer.EncodeOptions{})
		if !slices.Equal(ids, want) || len(mask) != len(ids) {
			t.Errorf("%s: ids %v, want %v (mask of %d)", name, ids, want, len(mask))
		}
		if bos, _ := tok.BOS(); ids[0] != bos || (len(ids) > 1 && ids[1] == bos) {
			t.Errorf("%s: want one BOS first, got %v", name, ids[:2])
		}
	}
}

// TestChatMask checks that the mask covers exactly the assistant turns:
// each run of masked tokens decodes to the turn as the template writes it,
// its content stripped and its end-of-turn tokens.
func TestChatMask(t *testing.T) {
	g := readChatGolden(t)
	for _, c := range g.Cases {
		if c.Gen || c.Error != nil {
			continue
		}
		ct, tok := goldenTemplate(t, g, c.Template)
		ids, mask, err := ct.Encode(tok, c.Messages)
		if err != nil {
			t.Fatalf("%s/%s: %v", c.Template, c.Conversation, err)
		}
		var want []string
		for _, m := range c.Messages {
			if m.Role != RoleAssistant {
				continue
			}
			if c.Template == "builtin:llama2" {
				want = append(want, " "+strings.TrimSpace(m.Content)+" </s>")
			} else {
				want = append(want, strings.TrimSpace(m.Content)+"<|eot_id|>")
			}
		}
		var got []string
		for i := 0; i < len(ids); {
			if mask[i] == 0 {
				i++
				continue
			}
			j := i
			for j < len(ids) && mask[j] == 1 {
				j++
			}
			// Decoded in context: a SentencePiece decoder drops the space
			// of a run's first token when decoded alone.
			before, through := tok.Decode(ids[:i]), tok.Decode(ids[:j])
			if !strings.HasPrefix(through, before) {
				t.Fatalf("%s/%s: decoding is not prefix-stable at %d", c.Template, c.Conversation, i)
			}
			got = append(got, through[len(before):])
			i = j
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s/%s: masked runs %q, want %q", c.Template, c.Conversation, got, want)
		}
	}
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, 7, 6, 15, 4, 5, 0, time.UTC)
	if got := Strftime("%d %b %Y|%B %A %a %H:%M:%S %I%p %j %y %m %% %q", at); got != "06 Jul 2024|July Saturday Sat 15:04:05 03PM 188 24 07 % %q" {
		t.Errorf("got %q", got)
	}
}

func TestParseChatRecord(t *testing.T) {
	ok := map[string][]Message{
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`: {{"user", "a"}, {"assistant", "b"}},
		`{"instruction":"Do","input":"x","output":"y"}`:                                   {{"user", "Do\n\nx"}, {"assistant", "y"}},
		`{"instruction":"Do","input":"","output":"y"}`:                                    {{"user", "Do"}, {"assistant", "y"}},
		`{"instruction":"Do","output":"y","input":null}`:                                  {{"user", "Do"}, {"assistant", "y"}},
	}
	for line, want := range ok {
		got, kind, detail := ParseChatRecord([]byte(line))
		if kind != "" || len(got) != len(want) {
			t.Errorf("%s: %v %s %s", line, got, kind, detail)
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: message %d %+v, want %+v", line, i, got[i], want[i])
			}
		}
	}
	bad := map[string]ProblemKind{
		`[1]`:  InvalidJSON,
		`null`: InvalidJSON,
		`{"messages":[{"role":"user","content":"\ud800"},{"role":"assistant","content":"b"}]}`: InvalidUTF8,
		`{"instruction":"\udc00","output":"b"}`:                                                InvalidUTF8,
		`{"text":"x"}`:                                                                         MissingField,
		`{"messages":[]}`:                                                                      EmptyText,
		`{"messages":null}`:                                                                    NullValue,
		`{"messages":"hi"}`:                                                                    WrongType,
		`{"messages":[1]}`:                                                                     WrongType,
		`{"messages":[{"content":"a"}]}`:                                                       MissingField,
		`{"messages":[{"role":"user"}]}`:                                                       MissingField,
		`{"messages":[{"role":"user","content":3}]}`:                                           WrongType,
		`{"messages":[{"role":"user","content":null}]}`:                                        NullValue,
		`{"messages":[{"role":"bot","content":"a"}]}`:                                          BadChat,
		`{"messages":[{"role":"user","content":"a"}]}`:                                         BadChat,
		`{"instruction":"a"}`:                                                                  MissingField,
		`{"instruction":"a","output":""}`:                                                      EmptyText,
		`{"instruction":1,"output":"b"}`:                                                       WrongType,
		"{\"instruction\":\"a\xff\",\"output\":\"b\"}":                                         InvalidUTF8,
	}
	for line, want := range bad {
		_, kind, detail := ParseChatRecord([]byte(line))
		if kind != want || detail == "" || strings.Contains(detail, "\n") {
			t.Errorf("%s: kind %q (%s), want %q", line, kind, detail, want)
		}
	}
}

func FuzzParseChatRecord(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`,
		`{"instruction":"Do","input":"x","output":"y"}`,
		`{"messages":[{"role":"bot","content":1}]}`, `{}`, `[`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		msgs, kind, detail := ParseChatRecord(line)
		if kind != "" {
			if msgs != nil || detail == "" || strings.Contains(detail, "\n") {
				t.Fatalf("problem %q %q with %d messages", kind, detail, len(msgs))
			}
			return
		}
		if len(msgs) == 0 || !hasAssistant(msgs) {
			t.Fatalf("no assistant turn in %v", msgs)
		}
		for _, m := range msgs {
			if m.Role != RoleSystem && m.Role != RoleUser && m.Role != RoleAssistant {
				t.Fatalf("role %q", m.Role)
			}
		}
	})
}

// TestChatTemplateChoice checks where a template comes from: the
// tokenizer's config (a string, or the "default" of a list), else the
// family's built-in format, or the one asked for.
func TestChatTemplateChoice(t *testing.T) {
	l2, f2 := chatTokenizer(t, "llama2")
	l3, f3 := chatTokenizer(t, "llama3")
	for _, c := range []struct {
		tok      *tokenizer.Tokenizer
		config   string
		template string
		want     string // Name, or the error
	}{
		{l3, string(f3[tokenizer.ConfigFileName]), "", tokenizer.ConfigFileName},
		{l2, string(f2[tokenizer.ConfigFileName]), "", "builtin:llama2"},
		{l3, "", "", "builtin:llama3"},
		{l2, "", "builtin:llama3", "builtin:llama3"},
		{l3, `{"chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"{{ bos_token }}"}]}`, "", tokenizer.ConfigFileName},
		{l3, `{"chat_template":[{"name":"tool_use","template":"x"}]}`, "", `tokenizer_config.json: chat_template lists no "default" template`},
		{l3, `{"chat_template":3}`, "", "tokenizer_config.json: chat_template is a number, want a string or a list"},
		{l3, `{"bos_token":{"content":"<|begin_of_text|>"}}`, "{{ bos_token }}", "custom"},
		{l3, "", "{% if %}", "chat template (custom)"},
		{l3, "", "builtin:gpt2", `chat template "builtin:gpt2"`},
	} {
		ct, err := NewChatTemplate(c.tok, []byte(c.config), ChatOptions{Template: c.template})
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = ct.Name
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("config %.40q, template %q: got %q, want %q", c.config, c.template, got, c.want)
		}
	}
	ct, err := NewChatTemplate(l3, []byte(`{"bos_token":{"content":"<B>"},"eos_token":"<E>"}`), ChatOptions{Template: "{{ bos_token }}{{ eos_token }}"})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := ct.Render(nil, false); s != "<B><E>" {
		t.Errorf("special tokens %q", s)
	}
}
