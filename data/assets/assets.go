// Package assets embeds the third-party files that memtrain ships so that a
// fresh clone, with no network and no model hub, can tokenize, run its demo
// and pass its tests: the Llama 2 and Llama 3 HuggingFace tokenizers and
// Jane Austen's novels by paragraph, and twelve State of the Union addresses. Provenance and licences are in NOTICE.md
// beside this file.
//
// Large files are stored gzip-compressed; the accessors return the
// decompressed bytes, so callers never see the compression.
package assets

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
)

//go:embed *.gz *.json
var files embed.FS

// Names of the embedded files, as accepted by Open and Read.
const (
	Llama2Tokenizer       = "llama2-tokenizer.json"
	Llama2TokenizerConfig = "llama2-tokenizer_config.json"
	Llama3Tokenizer       = "llama3-tokenizer.json"
	Llama3TokenizerConfig = "llama3-tokenizer_config.json"
	Austen                = "austen.jsonl"
	SOTU                  = "sotu.jsonl" // twelve State of the Union addresses
)

// Open returns a reader of the named asset's decompressed contents.
func Open(name string) (io.ReadCloser, error) {
	if f, err := files.Open(name); err == nil {
		return f, nil
	}
	f, err := files.Open(name + ".gz")
	if err != nil {
		return nil, fmt.Errorf("assets: no embedded file %q", name)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("assets: %s.gz: %w", name, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// Read returns the named asset's decompressed contents.
func Read(name string) ([]byte, error) {
	rc, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, fmt.Errorf("assets: %s: %w", name, err)
	}
	return buf.Bytes(), nil
}
