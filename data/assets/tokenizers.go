package assets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
)

// builtinTokenizers maps builtin:NAME to the embedded tokenizer files.
var builtinTokenizers = map[string][2]string{
	"llama2": {Llama2Tokenizer, Llama2TokenizerConfig},
	"llama3": {Llama3Tokenizer, Llama3TokenizerConfig},
}

// TokenizerFiles reads the tokenizer named by spec — a tokenizer.json, a
// folder holding one (e.g. a checkpoint), or builtin:llama2 /
// builtin:llama3 for the embedded Meta tokenizers: its files
// (tokenizer.json and, when present, tokenizer_config.json, keyed by those
// names) and the name to parse them under (tokenizer.Parse), so that a
// checkpoint written with it can carry them. (It does not parse them
// itself: the tokenizer package's tests use this package.)
func TokenizerFiles(spec string) (name string, files map[string][]byte, err error) {
	if spec == "" {
		return "", nil, errors.New("no tokenizer given (use --tokenizer)")
	}
	files = map[string][]byte{}
	if name, ok := strings.CutPrefix(spec, "builtin:"); ok {
		pair, ok := builtinTokenizers[name]
		if !ok {
			return "", nil, fmt.Errorf("unknown builtin tokenizer %q (want builtin:llama2 or builtin:llama3)", name)
		}
		for i, file := range []string{checkpoints.TokenizerFile, checkpoints.TokenizerConfigFile} {
			b, err := Read(pair[i])
			if err != nil {
				return "", nil, err
			}
			files[file] = b
		}
	} else {
		path := spec
		if st, err := os.Stat(path); err != nil {
			return "", nil, fmt.Errorf("tokenizer: %w", err)
		} else if st.IsDir() {
			path = filepath.Join(path, checkpoints.TokenizerFile)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", nil, fmt.Errorf("tokenizer: %w", err)
		}
		files[checkpoints.TokenizerFile] = b
		cfgPath := filepath.Join(filepath.Dir(path), checkpoints.TokenizerConfigFile)
		if b, err := os.ReadFile(cfgPath); err == nil {
			files[checkpoints.TokenizerConfigFile] = b
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", nil, fmt.Errorf("tokenizer: %w", err)
		}
		spec = path
	}
	return spec, files, nil
}
