package data

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

func TestOpenTokenizer(t *testing.T) {
	tok, files, err := OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	want, err := assets.Read(assets.Llama2Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files[tokenizer.FileName], want) || len(files[tokenizer.ConfigFileName]) == 0 {
		t.Fatalf("builtin:llama2 files: %d bytes of %s, %d of %s", len(files[tokenizer.FileName]), tokenizer.FileName, len(files[tokenizer.ConfigFileName]), tokenizer.ConfigFileName)
	}

	// A folder holding the same files, then its tokenizer.json alone (the
	// config beside it is read too), then a tokenizer.json without one.
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, spec := range []string{dir, filepath.Join(dir, tokenizer.FileName)} {
		got, gotFiles, err := OpenTokenizer(spec)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got.Hash() != tok.Hash() || !slices.Equal(slices.Sorted(maps.Keys(gotFiles)), []string{tokenizer.FileName, tokenizer.ConfigFileName}) {
			t.Errorf("%s: another tokenizer, or files %v", spec, slices.Sorted(maps.Keys(gotFiles)))
		}
	}
	os.Remove(filepath.Join(dir, tokenizer.ConfigFileName))
	if _, gotFiles, err := OpenTokenizer(dir); err != nil || len(gotFiles) != 1 {
		t.Errorf("without %s: %d files, %v", tokenizer.ConfigFileName, len(gotFiles), err)
	}

	for spec, want := range map[string]string{
		"":                         "no tokenizer given",
		"builtin:gpt2":             `"gpt2"`,
		filepath.Join(dir, "nope"): "nope",
		t.TempDir():                tokenizer.FileName,
	} {
		if _, _, err := OpenTokenizer(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenTokenizer(%q) = %v, want an error mentioning %q", spec, err, want)
		}
	}
}
