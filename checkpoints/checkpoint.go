package checkpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// A Checkpoint is an opened HuggingFace Llama checkpoint folder: its
// validated configuration and its memory-mapped weights.
type Checkpoint struct {
	Dir     string
	Config  *Config
	Weights *Set
}

// rotaryBuffer matches the inverse-frequency buffers that older Llama 2
// checkpoints saved alongside the weights; they are derived from the config
// and carry no trained state.
var rotaryBuffer = regexp.MustCompile(`^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$`)

// Open reads dir/config.json, opens the weights and checks that they are
// exactly the tensors the configuration implies, with the right shapes.
func Open(dir string) (*Checkpoint, error) {
	cfg, err := ReadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	set, err := OpenSet(dir)
	if err != nil {
		return nil, err
	}
	if err := checkTensors(dir, cfg, set); err != nil {
		set.Close()
		return nil, err
	}
	return &Checkpoint{Dir: dir, Config: cfg, Weights: set}, nil
}

func checkTensors(dir string, cfg *Config, set *Set) error {
	want := map[string][]int{}
	for _, s := range cfg.TensorSpecs() {
		want[s.Name] = s.Shape
	}
	var missing []string
	for _, s := range cfg.TensorSpecs() {
		info, ok := set.Tensor(s.Name)
		if !ok {
			missing = append(missing, s.Name)
			continue
		}
		if !slices.Equal(info.Shape, s.Shape) {
			return fmt.Errorf("checkpoints: %s: tensor %q: shape %v disagrees with %s (want %v)",
				set.FileOf(s.Name), s.Name, info.Shape, ConfigFile, s.Shape)
		}
	}
	if len(missing) > 0 {
		more := ""
		if len(missing) > 3 {
			more = fmt.Sprintf(" and %d more", len(missing)-3)
			missing = missing[:3]
		}
		return fmt.Errorf("checkpoints: %s: missing tensor %s%s required by %s", dir, strings.Join(quoteAll(missing), ", "), more, ConfigFile)
	}
	for _, info := range set.Tensors() {
		if _, ok := want[info.Name]; ok || rotaryBuffer.MatchString(info.Name) {
			continue
		}
		if info.Name == LMHeadName && cfg.TieWordEmbeddings {
			// Some exporters store the tied head anyway; it is the embedding.
			continue
		}
		return fmt.Errorf("checkpoints: %s: tensor %q: not a weight of a Llama model with this %s", set.FileOf(info.Name), info.Name, ConfigFile)
	}
	return nil
}

// Close releases the memory-mapped weights.
func (c *Checkpoint) Close() error { return c.Weights.Close() }

// TokenizerPath returns the path of the folder's tokenizer.json, or "" when
// it has none.
func (c *Checkpoint) TokenizerPath() string { return TokenizerPathIn(c.Dir) }

// TokenizerPathIn is TokenizerPath of the checkpoint folder dir.
func TokenizerPathIn(dir string) string {
	p := filepath.Join(dir, tokenizer.FileName)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// ReadAll reads every weight the configuration names, converted to float32,
// in TensorSpecs order.
func (c *Checkpoint) ReadAll() ([]Tensor, error) {
	specs := c.Config.TensorSpecs()
	out := make([]Tensor, len(specs))
	for i, s := range specs {
		data, err := c.Weights.ReadFloat32(s.Name)
		if err != nil {
			return nil, err
		}
		out[i] = Tensor{Name: s.Name, Shape: append([]int(nil), s.Shape...), Data: data}
	}
	return out, nil
}

// SaveOptions control how Save writes a checkpoint.
type SaveOptions struct {
	DType         DType             // storage type of the weights (F32 or BF16)
	MaxShardBytes int64             // split into shards above this size; 0 writes one file
	Files         map[string][]byte // extra files to write beside the weights, e.g. the tokenizer's
	// Sums, if not nil, receives the FileSum of every file Save writes
	// (weights, index, extra files, config.json), by file name, hashed
	// as the bytes are written.
	Sums map[string]FileSum
}

// Save writes a complete checkpoint folder: the weights, the extra files
// (tokenizer.json, tokenizer_config.json, …) and config.json, last, so that
// a folder with a config.json always holds the weights it describes. Every
// file is written atomically. The tensors must be exactly those of
// cfg.TensorSpecs.
func Save(dir string, cfg *Config, tensors []Tensor, opt SaveOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if opt.DType != DTypeF32 && opt.DType != DTypeBF16 {
		return fmt.Errorf("checkpoints: %s: cannot save weights as %s (want F32 or BF16)", dir, opt.DType)
	}
	specs := cfg.TensorSpecs()
	if len(tensors) != len(specs) {
		return fmt.Errorf("checkpoints: %s: %d tensors given, the config implies %d", dir, len(tensors), len(specs))
	}
	byName := make(map[string]Tensor, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, s := range specs {
		t, ok := byName[s.Name]
		if !ok {
			return fmt.Errorf("checkpoints: %s: tensor %q required by the config is missing", dir, s.Name)
		}
		if !slices.Equal(t.Shape, s.Shape) {
			return fmt.Errorf("checkpoints: %s: tensor %q: shape %v, the config implies %v", dir, s.Name, t.Shape, s.Shape)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if _, err := WriteSet(dir, tensors, WriteOptions{DType: opt.DType, MaxShardBytes: opt.MaxShardBytes, Sums: opt.Sums}); err != nil {
		return err
	}
	return SaveMeta(dir, cfg, opt)
}

// SaveMeta writes what a checkpoint folder holds besides its weights: the
// extra files of opt (the tokenizer's), then config.json, last, recording
// opt.DType as the weights' torch_dtype; each atomically, with its
// FileSum in opt.Sums when that is not nil. Save calls it after the
// weights; a writer of weights of its own (a sharded training checkpoint,
// a streamed export) calls it after those.
func SaveMeta(dir string, cfg *Config, opt SaveOptions) error {
	names := make([]string, 0, len(opt.Files))
	for name := range opt.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name != filepath.Base(name) || name == ConfigFile {
			return fmt.Errorf("checkpoints: %s: cannot write extra file %q (want a plain file name other than %s)", dir, name, ConfigFile)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, name), opt.Files[name]); err != nil {
			return err
		}
		if opt.Sums != nil {
			opt.Sums[name] = SumBytes(opt.Files[name])
		}
	}
	cfg = cfg.Clone()
	cfg.TorchDType = opt.DType.TorchName()
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("checkpoints: %s: %w", dir, err)
	}
	b = append(b, '\n')
	if err := atomicfile.WriteFile(filepath.Join(dir, ConfigFile), b); err != nil {
		return err
	}
	if opt.Sums != nil {
		opt.Sums[ConfigFile] = SumBytes(b)
	}
	return nil
}

// ReadTokenizerFiles returns the tokenizer files (tokenizer.Files) found in
// the checkpoint folder dir, keyed by name, ready to pass to
// SaveOptions.Files so that a derived checkpoint carries its base's
// tokenizer.
func ReadTokenizerFiles(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, name := range tokenizer.Files {
		b, err := inputfile.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoints: %w", err)
		}
		files[name] = b
	}
	return files, nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}
