package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// A Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// The roles a conversation's messages may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// BadChat is the problem of a chat record whose conversation cannot be
// trained on: an unknown role, no assistant turn, or a rendering the
// template refuses.
const BadChat ProblemKind = "bad-chat"

// ParseChatRecord reads one chat record, a JSON object, in either of two
// formats: "messages", a non-empty array of {"role", "content"} objects
// (role system, user or assistant; content a string), or the alpaca
// format, "instruction" and "output" strings with an optional "input"
// string, which becomes a user turn (instruction, and "\n\n" and input when
// input is not empty) and an assistant turn (output). A conversation must
// have an assistant turn, the tokens trained on. It returns the problem's
// kind and a one-line detail when the record makes no conversation.
func ParseChatRecord(line []byte) ([]Message, ProblemKind, string) {
	if !utf8.Valid(line) {
		return nil, InvalidUTF8, "the record is not valid UTF-8"
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(line, &rec); err != nil || rec == nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, InvalidJSON, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
		}
		return nil, InvalidJSON, "invalid JSON: want an object of \"messages\" or \"instruction\"/\"output\""
	}
	if raw, ok := rec["messages"]; ok {
		return parseMessages(raw)
	}
	if _, ok := rec["instruction"]; ok {
		return parseAlpaca(rec)
	}
	return nil, MissingField, `no field "messages" (chat) or "instruction" (alpaca)`
}

func parseMessages(raw json.RawMessage) ([]Message, ProblemKind, string) {
	k := rawKind(raw)
	if k == "null" {
		return nil, NullValue, `field "messages" is null`
	}
	if k != "an array" {
		return nil, WrongType, fmt.Sprintf(`field "messages" is %s, want an array of {"role", "content"} objects`, k)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, InvalidJSON, fmt.Sprintf(`field "messages": %v`, err)
	}
	if len(items) == 0 {
		return nil, EmptyText, `field "messages" is an empty array`
	}
	msgs := make([]Message, 0, len(items))
	for i, it := range items {
		if k := rawKind(it); k != "an object" {
			return nil, WrongType, fmt.Sprintf(`messages[%d] is %s, want a {"role", "content"} object`, i, k)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(it, &obj); err != nil {
			return nil, InvalidJSON, fmt.Sprintf("messages[%d]: %v", i, err)
		}
		var m Message
		for _, f := range []struct {
			key string
			dst *string
		}{{"role", &m.Role}, {"content", &m.Content}} {
			v, ok := obj[f.key]
			if !ok {
				return nil, MissingField, fmt.Sprintf("messages[%d] has no %q", i, f.key)
			}
			switch k := rawKind(v); k {
			case "null":
				return nil, NullValue, fmt.Sprintf("messages[%d].%s is null", i, f.key)
			case "a string":
			default:
				return nil, WrongType, fmt.Sprintf("messages[%d].%s is %s, want a string", i, f.key, k)
			}
			text, off := decodeJSONString(v)
			if off >= 0 {
				return nil, InvalidUTF8, fmt.Sprintf("messages[%d].%s is not valid UTF-8 (byte %d of the field)", i, f.key, off)
			}
			*f.dst = text
		}
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return nil, BadChat, fmt.Sprintf("messages[%d].role %q: want system, user or assistant", i, m.Role)
		}
		msgs = append(msgs, m)
	}
	if !hasAssistant(msgs) {
		return nil, BadChat, `field "messages" has no assistant turn to train on`
	}
	return msgs, "", ""
}

func parseAlpaca(rec map[string]json.RawMessage) ([]Message, ProblemKind, string) {
	get := func(key string, required bool) (string, ProblemKind, string) {
		v, ok := rec[key]
		if !ok {
			if required {
				return "", MissingField, fmt.Sprintf("no field %q (alpaca records have instruction, input and output)", key)
			}
			return "", "", ""
		}
		switch k := rawKind(v); k {
		case "null":
			if !required {
				return "", "", ""
			}
			return "", NullValue, fmt.Sprintf("field %q is null", key)
		case "a string":
		default:
			return "", WrongType, fmt.Sprintf("field %q is %s, want a string", key, k)
		}
		s, off := decodeJSONString(v)
		if off >= 0 {
			return "", InvalidUTF8, fmt.Sprintf("field %q is not valid UTF-8 (byte %d of the field)", key, off)
		}
		if required && isBlank(s) {
			return "", EmptyText, fmt.Sprintf("field %q is empty", key)
		}
		return s, "", ""
	}
	instr, kind, detail := get("instruction", true)
	if kind != "" {
		return nil, kind, detail
	}
	input, kind, detail := get("input", false)
	if kind != "" {
		return nil, kind, detail
	}
	output, kind, detail := get("output", true)
	if kind != "" {
		return nil, kind, detail
	}
	user := instr
	if input != "" {
		user += "\n\n" + input
	}
	return []Message{{Role: RoleUser, Content: user}, {Role: RoleAssistant, Content: output}}, "", ""
}

func hasAssistant(msgs []Message) bool {
	for _, m := range msgs {
		if m.Role == RoleAssistant {
			return true
		}
	}
	return false
}

// rawKind names the kind of a valid JSON value.
func rawKind(raw json.RawMessage) string {
	b := []byte(strings.TrimLeft(string(raw), " \t\r\n"))
	if len(b) == 0 {
		return "empty"
	}
	return jsonKind(b)
}

// The built-in chat formats, for tokenizers whose tokenizer_config.json
// holds no chat_template: Meta's templates of Llama-2-7b-chat-hf and
// Meta-Llama-3-8B-Instruct, verbatim.
const (
	Llama2ChatTemplate = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
	Llama3ChatTemplate = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

// ChatOptions control a ChatTemplate.
type ChatOptions struct {
	// Template, when set, is the template's source, in place of the
	// tokenizer's: "builtin:llama2" or "builtin:llama3" for the built-in
	// formats, or Jinja source.
	Template string
	// Now is the time strftime_now reports (the zero time: the clock's).
	// Llama 3.1 and later templates print the date; a fixed one makes a
	// dataset reproducible.
	Now time.Time
}

// A ChatTemplate renders conversations as a checkpoint's chat template
// does (HF apply_chat_template): Jinja with messages, bos_token,
// eos_token, add_generation_prompt, raise_exception and strftime_now. It is
// safe for concurrent use.
type ChatTemplate struct {
	// Name says where the template came from: "tokenizer_config.json",
	// "builtin:llama2", "builtin:llama3" or "custom".
	Name string
	// Source is the Jinja source.
	Source   string
	tmpl     *jinja.Template
	bos, eos string
	now      time.Time
	// tail is what the template renders for no messages when that is also
	// the end of every rendering (a generation prompt appended whatever
	// add_generation_prompt says): it belongs to no assistant turn.
	tail string
}

// NewChatTemplate returns the chat template of a tokenizer: opt.Template,
// else the chat_template of its tokenizer_config.json (config may be nil),
// else the built-in format of its family (Llama 3's for byte-level BPE,
// Llama 2's for SentencePiece-style BPE).
func NewChatTemplate(tok *tokenizer.Tokenizer, config []byte, opt ChatOptions) (*ChatTemplate, error) {
	t := &ChatTemplate{now: opt.Now}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return nil, fmt.Errorf("data: %s: %v", tokenizer.ConfigFileName, err)
		}
	}
	var err error
	if t.bos, err = tokenizer.TokenName(cfg.BOS); err != nil {
		return nil, fmt.Errorf("data: %s: bos_token: %w", tokenizer.ConfigFileName, err)
	}
	if t.eos, err = tokenizer.TokenName(cfg.EOS); err != nil {
		return nil, fmt.Errorf("data: %s: eos_token: %w", tokenizer.ConfigFileName, err)
	}
	if t.bos == "" {
		if id, ok := tok.BOS(); ok {
			t.bos, _ = tok.Token(id)
		}
	}
	if t.eos == "" {
		if id, ok := tok.EOS(); ok {
			t.eos, _ = tok.Token(id)
		}
	}
	switch {
	case opt.Template == "builtin:llama2":
		t.Name, t.Source = opt.Template, Llama2ChatTemplate
	case opt.Template == "builtin:llama3":
		t.Name, t.Source = opt.Template, Llama3ChatTemplate
	case strings.HasPrefix(opt.Template, "builtin:"):
		return nil, fmt.Errorf("data: chat template %q: want builtin:llama2, builtin:llama3 or Jinja source", opt.Template)
	case opt.Template != "":
		t.Name, t.Source = "custom", opt.Template
	case len(cfg.ChatTemplate) > 0 && rawKind(cfg.ChatTemplate) != "null":
		src, err := configTemplate(cfg.ChatTemplate)
		if err != nil {
			return nil, err
		}
		t.Name, t.Source = tokenizer.ConfigFileName, src
	case tok.Family() == "bpe/sentencepiece":
		t.Name, t.Source = "builtin:llama2", Llama2ChatTemplate
	default:
		t.Name, t.Source = "builtin:llama3", Llama3ChatTemplate
	}
	if t.tmpl, err = jinja.Compile(t.Source); err != nil {
		return nil, fmt.Errorf("data: chat template (%s): %w", t.Name, err)
	}
	if s, err := t.Render(nil, false); err == nil && s != "" {
		t.tail = s
	}
	return t, nil
}

// configTemplate returns tokenizer_config.json's chat_template: a string,
// or the "default" of a list of {"name", "template"}.
func configTemplate(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("data: %s: chat_template is %s, want a string or a list of {name, template}", tokenizer.ConfigFileName, rawKind(raw))
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("data: %s: chat_template lists no \"default\" template", tokenizer.ConfigFileName)
}

// Render renders a conversation, with the generation prompt of the next
// assistant turn when addGenerationPrompt is set.
func (t *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	now := t.now
	vals := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"bos_token":             jinja.NewString(t.bos),
		"eos_token":             jinja.NewString(t.eos),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Undefined(), errors.New("strftime_now: want one format string")
			}
			at := now
			if at.IsZero() {
				at = time.Now()
			}
			return jinja.NewString(Strftime(args[0].AsString(), at)), nil
		}),
	}
	s, err := t.tmpl.RenderValues(vals)
	if err != nil {
		return "", fmt.Errorf("chat template (%s): %w", t.Name, err)
	}
	return s, nil
}

// Strftime formats at as Python's strftime does for the directives chat
// templates use (%d %m %Y %y %B %b %A %a %H %I %M %S %p %j %%); others are
// kept as written.
func Strftime(format string, at time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", at.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(at.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%04d", at.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", at.Year()%100)
		case 'B':
			b.WriteString(at.Month().String())
		case 'b':
			b.WriteString(at.Month().String()[:3])
		case 'A':
			b.WriteString(at.Weekday().String())
		case 'a':
			b.WriteString(at.Weekday().String()[:3])
		case 'H':
			fmt.Fprintf(&b, "%02d", at.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (at.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", at.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", at.Second())
		case 'p':
			if at.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			fmt.Fprintf(&b, "%03d", at.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// Encode renders a conversation and tokenizes it with special-token
// parsing on and no added special tokens (the template writes BOS itself),
// as HF apply_chat_template(tokenize=True) does. mask[i] is 1 where ids[i]
// is a token of an assistant turn (its content and the end-of-turn tokens
// the template writes after it) and 0 elsewhere. An assistant turn's span
// is found by rendering prefixes: the conversation up to it with the
// generation prompt, whose tokens end where the turn starts, and through
// it, whose tokens end where it ends (less the template's constant tail,
// see ChatTemplate). Both renderings must be prefixes of the whole one, as
// strings and as tokens; a template or text for which they are not is an
// error, since no span could be told.
func (t *ChatTemplate) Encode(tok *tokenizer.Tokenizer, msgs []Message) (ids []int32, mask []uint8, err error) {
	opt := tokenizer.EncodeOptions{}
	full, err := t.Render(msgs, false)
	if err != nil {
		return nil, nil, err
	}
	if ids, err = tok.EncodeChecked(full, opt); err != nil {
		return nil, nil, err
	}
	mask = make([]uint8, len(ids))
	prefix := func(k int, gen bool) (int, error) {
		s, err := t.Render(msgs[:k], gen)
		if err != nil {
			return 0, err
		}
		if !gen && t.tail != "" {
			s = strings.TrimSuffix(s, t.tail)
		}
		if !strings.HasPrefix(full, s) {
			return 0, fmt.Errorf("chat template (%s): the rendering of the first %d messages is not a prefix of the conversation's", t.Name, k)
		}
		p, err := tok.EncodeChecked(s, opt)
		if err != nil {
			return 0, err
		}
		if len(p) > len(ids) || !slices.Equal(p, ids[:len(p)]) {
			return 0, fmt.Errorf("chat template (%s): the tokens of the first %d messages are not a prefix of the conversation's", t.Name, k)
		}
		return len(p), nil
	}
	for k, m := range msgs {
		if m.Role != RoleAssistant {
			continue
		}
		a, err := prefix(k, true)
		if err != nil {
			return nil, nil, err
		}
		b, err := prefix(k+1, false)
		if err != nil {
			return nil, nil, err
		}
		for i := a; i < b; i++ {
			mask[i] = 1
		}
	}
	return ids, mask, nil
}
