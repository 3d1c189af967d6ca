package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// minimal returns a tokenizer.json with the given model and other fields.
func minimal(model string, fields ...string) string {
	s := `{"model": ` + model
	for _, f := range fields {
		s += ", " + f
	}
	return s + "}"
}

const okModel = `{"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}`

func TestParseErrors(t *testing.T) {
	const name = "/models/x/tokenizer.json"
	for _, c := range []struct {
		json string
		want string // the error message after "tokenizer: /models/x/tokenizer.json: "
	}{
		{`{`, `not a tokenizer.json file: unexpected end of JSON input`},
		{``, `not a tokenizer.json file: unexpected end of JSON input`},
		{`[1, 2]`, `not a tokenizer.json file: want a JSON object`},
		{`null`, `not a tokenizer.json file: want a JSON object`},
		{`{}`, `model: missing`},
		{minimal(`[]`), `model: want a JSON object`},
		{minimal(`{"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 0}`), `model.type: unsupported tokenizer model "Unigram" (want BPE)`},
		{minimal(`{"type": "WordPiece", "vocab": {"a": 0}}`), `model.type: unsupported tokenizer model "WordPiece" (want BPE)`},
		{minimal(`{"type": "WordLevel", "vocab": {"a": 0}}`), `model.type: unsupported tokenizer model "WordLevel" (want BPE)`},
		{minimal(`{"vocab": {"a": 0}}`), `model.type: missing`},
		{minimal(`{"type": 3}`), `model.type: got JSON number, want string`},
		{minimal(`{"type": "BPE", "merges": []}`), `model.vocab: missing`},
		{minimal(`{"type": "BPE", "vocab": null}`), `model.vocab: missing`},
		{minimal(`{"type": "BPE", "vocab": ["a"]}`), `model.vocab: got JSON array, want object`},
		{minimal(`{"type": "BPE", "vocab": {"b": 0, "c": 1, "a": 0}, "merges": []}`), `model.vocab: tokens "a" and "b" have the same id 0 (want one id a token)`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}`), `model.vocab: token "a" appears twice`},
		{minimal(`{"type": "BPE", "vocab": {"a": "x"}}`), `model.vocab: token "a" has id "x", want an integer in [0, 2³¹)`},
		{minimal(`{"type": "BPE", "vocab": {"a": -1}}`), `model.vocab: token "a" has id -1, want an integer in [0, 2³¹)`},
		{minimal(`{"type": "BPE", "vocab": {"a": 1.5}}`), `model.vocab: token "a" has id 1.5, want an integer in [0, 2³¹)`},
		{minimal(`{"type": "BPE", "vocab": {"a": 100000000}}`), `model.vocab: ids up to 100000000 for 1 tokens are too sparse`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]}`), `model.merges[0]: "a b c" is not two tokens separated by a space`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["ab"]}`), `model.merges[0]: "ab" is not two tokens separated by a space`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", 7]}`), `model.merges[1]: 7 is not a string "a b" or a pair ["a", "b"]`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b", "c"]]}`), `model.merges[0]: ["a", "b", "c"] is not a string "a b" or a pair ["a", "b"]`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", ["a", "b"]]}`), `model.merges: mixes strings and pairs`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": {"a": "b"}}`), `model.merges: got JSON object, want array`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a z"]}`), `model.merges[0]: token "z" is not in model.vocab`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}`), `model.merges[0]: merged token "ab" is not in model.vocab`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0}, "unk_token": "<unk>"}`), `model.unk_token: "<unk>" is not in model.vocab`},
		{minimal(`{"type": "BPE", "vocab": {"a": 0}, "dropout": 0.1}`), `model.dropout: BPE dropout 0.1 is not supported`},
		{minimal(okModel, `"added_tokens": {}`), `added_tokens: got JSON object, want array`},
		{minimal(okModel, `"added_tokens": [{"content": "<x>"}]`), `added_tokens[0].id: missing`},
		{minimal(okModel, `"added_tokens": [{"id": -3, "content": "<x>"}]`), `added_tokens[0].id: -3 is out of range`},
		{minimal(okModel, `"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "BertNormalizer"}]}`), `normalizer.normalizers[1].type: unsupported normalizer "BertNormalizer"`},
		{minimal(okModel, `"normalizer": {"type": "Lowercase"}`), `normalizer.type: unsupported normalizer "Lowercase"`},
		{minimal(okModel, `"normalizer": {"prepend": "x"}`), `normalizer.type: missing`},
		{minimal(okModel, `"normalizer": {"type": "Replace", "pattern": {"Regex": "("}, "content": ""}`), `normalizer.pattern.Regex: error parsing regexp: missing closing ) in ` + "`(`"},
		{minimal(okModel, `"normalizer": {"type": "Replace", "pattern": {}, "content": ""}`), `normalizer.pattern: want {"String": …} or {"Regex": …}`},
		{minimal(okModel, `"pre_tokenizer": {"type": "Whitespace"}`), `pre_tokenizer.type: unsupported pre-tokenizer "Whitespace"`},
		{minimal(okModel, `"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"}]}`), `pre_tokenizer: ByteLevel must be the last pre-tokenizer`},
		{minimal(okModel, `"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}`), `pre_tokenizer.behavior: unknown split behavior "Sideways"`},
		{minimal(okModel, `"decoder": {"type": "WordPiece"}`), `decoder.type: unsupported decoder "WordPiece"`},
		{minimal(okModel, `"decoder": {"type": "Sequence", "decoders": [{"type": "Strip", "content": "ab", "start": 1}]}`), `decoder.decoders[0].content: "ab" is not one character`},
		{minimal(okModel, `"post_processor": {"type": "Bogus"}`), `post_processor.type: unsupported post-processor "Bogus"`},
		{minimal(okModel, `"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {}}`), `post_processor.special_tokens: no entry for "<s>"`},
		{minimal(okModel, `"post_processor": {"type": "TemplateProcessing", "single": "$A $B"}`), `post_processor.single: sequence "$B" in a single-sequence template`},
		{minimal(okModel, `"post_processor": {"type": "TemplateProcessing", "single": "a", "special_tokens": {"a": {"ids": [0]}}}`), `post_processor.single: no $A`},
	} {
		_, err := Parse(name, []byte(c.json), nil)
		want := "tokenizer: " + name + ": " + c.want
		if err == nil || err.Error() != want {
			t.Errorf("Parse(%.80s):\n got error %v\nwant error %s", c.json, err, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := Parse("tok.json", []byte(minimal(okModel)), []byte(`{"bos_token": 7}`))
	if want := `tokenizer: tokenizer_config.json: bos_token: want a string or an object with "content"`; err == nil || err.Error() != want {
		t.Errorf("got error %v, want %s", err, want)
	}
	_, err = Parse("tok.json", []byte(minimal(okModel)), []byte(`{`))
	if err == nil || !strings.HasPrefix(err.Error(), "tokenizer: tokenizer_config.json: not a tokenizer_config.json file") {
		t.Errorf("got error %v", err)
	}
	// A config that names unknown tokens, or names them with objects.
	tok, err := Parse("tok.json", []byte(minimal(okModel)), []byte(`{"bos_token": {"content": "ab"}, "eos_token": "<nope>"}`))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.BOS(); !ok || id != 2 {
		t.Errorf("BOS = %d, %v, want 2", id, ok)
	}
	if id, ok := tok.EOS(); ok {
		t.Errorf("EOS = %d, want none", id)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "tokenizer.json")
	_, err := Load(missing)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
		t.Errorf("Load(missing) error = %v", err)
	}
	_, err = Load(dir) // a directory without tokenizer.json
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")) {
		t.Errorf("Load(empty dir) error = %v", err)
	}
	bad := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(bad, []byte(minimal(`{"type": "Unigram"}`)), 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	if want := "tokenizer: " + bad + `: model.type: unsupported tokenizer model "Unigram" (want BPE)`; err == nil || err.Error() != want {
		t.Errorf("Load(Unigram) error = %v, want %s", err, want)
	}
	if err := os.WriteFile(bad, []byte(minimal(okModel)), 0o666); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(cfg, []byte(`{"eos_token": []}`), 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := "tokenizer: " + cfg + `: eos_token: want a string or an object with "content"`; err == nil || err.Error() != want {
		t.Errorf("Load(bad config) error = %v, want %s", err, want)
	}
}
