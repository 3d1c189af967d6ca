package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
)

// The real tokenizers and the Austen corpus are loaded once per test binary.
var (
	llama2Once, llama3Once, austenOnce sync.Once
	llama2Tok, llama3Tok               *Tokenizer
	llama2Err, llama3Err, austenErr    error
	austenTexts                        []string
)

func loadAsset(tokName, cfgName string) (*Tokenizer, error) {
	data, err := assets.Read(tokName)
	if err != nil {
		return nil, err
	}
	cfg, err := assets.Read(cfgName)
	if err != nil {
		return nil, err
	}
	return Parse(tokName, data, cfg)
}

func llama2(tb testing.TB) *Tokenizer {
	tb.Helper()
	llama2Once.Do(func() { llama2Tok, llama2Err = loadAsset(assets.Llama2Tokenizer, assets.Llama2TokenizerConfig) })
	if llama2Err != nil {
		tb.Fatal(llama2Err)
	}
	return llama2Tok
}

func llama3(tb testing.TB) *Tokenizer {
	tb.Helper()
	llama3Once.Do(func() { llama3Tok, llama3Err = loadAsset(assets.Llama3Tokenizer, assets.Llama3TokenizerConfig) })
	if llama3Err != nil {
		tb.Fatal(llama3Err)
	}
	return llama3Tok
}

// austen returns the texts of the Austen corpus, one per paragraph.
func austen(tb testing.TB) []string {
	tb.Helper()
	austenOnce.Do(func() {
		data, err := assets.Read(assets.Austen)
		if err != nil {
			austenErr = err
			return
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				austenErr = err
				return
			}
			austenTexts = append(austenTexts, rec.Text)
		}
		austenErr = sc.Err()
	})
	if austenErr != nil {
		tb.Fatal(austenErr)
	}
	return austenTexts
}

// goldenCase is a line of testdata/llama2.jsonl or llama3.jsonl.
type goldenCase struct {
	Name             string  `json:"name"`
	Text             string  `json:"text"`
	IDs              []int32 `json:"ids"`
	IDsWithSpecial   []int32 `json:"ids_with_special"`
	IDsSpecialAsText []int32 `json:"ids_special_as_text"`
	Decoded          string  `json:"decoded"`
}

func readGolden(tb testing.TB, file string) []goldenCase {
	tb.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var cases []goldenCase
	for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var c goldenCase
		if err := json.Unmarshal(line, &c); err != nil {
			tb.Fatalf("%s:%d: %v", file, i+1, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func llama3Files(tb testing.TB) (data, cfg []byte) {
	tb.Helper()
	data, err := assets.Read(assets.Llama3Tokenizer)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err = assets.Read(assets.Llama3TokenizerConfig)
	if err != nil {
		tb.Fatal(err)
	}
	return data, cfg
}
