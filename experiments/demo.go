package experiments

import (
	_ "embed"
	"fmt"
)

// The demo's specs: a small Llama with the Llama 2 tokenizer, pretrained
// briefly on Jane Austen, fine-tuned many epochs on State of the Union
// passages with the standard loss and with the goldfish loss (k = 4,
// hash-table, h = 13), then evaluated on those passages and on held-out
// ones. They use only bundled data (builtin:austen, builtin:sotu), so they
// run on a fresh clone.
var (
	//go:embed specs/demo.yaml
	demoSpec []byte
	//go:embed specs/demo-quick.yaml
	demoQuickSpec []byte
)

// DemoSpec returns the demo's spec: the full study, or with quick a
// smaller one (16 targets) that runs in about a minute.
func DemoSpec(quick bool) (*Spec, error) {
	b := demoSpec
	if quick {
		b = demoQuickSpec
	}
	s, err := ParseSpec(b, "")
	if err != nil {
		return nil, fmt.Errorf("experiments: demo spec: %w", err)
	}
	return s, nil
}

// DemoSpecYAML returns the demo spec's text, for users to copy and edit.
func DemoSpecYAML(quick bool) []byte {
	if quick {
		return append([]byte(nil), demoQuickSpec...)
	}
	return append([]byte(nil), demoSpec...)
}
