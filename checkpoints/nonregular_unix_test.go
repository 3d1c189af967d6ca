//go:build unix

package checkpoints

import (
	"github.com/memtrain/memtrain/internal/inputfile/fifotest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// TestNonRegularFiles: a checkpoint file that is a named pipe is refused
// by name before it is opened (opening it would wait for a writer for
// ever); the test fails rather than hangs if anything opens it.
func TestNonRegularFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard int64  // MaxShardBytes of the saved checkpoint
		fifo  string // the file replaced by a named pipe
		open  func(dir string) error
	}{
		{"the weights", 0, SafetensorsFile, func(dir string) error { _, err := Open(dir); return err }},
		{"a shard", 4096, "model-00002-of-", func(dir string) error { _, err := Open(dir); return err }},
		{"the index", 4096, SafetensorsIndexFile, func(dir string) error { _, err := OpenSet(dir); return err }},
		{"the config", 0, ConfigFile, func(dir string) error { _, err := ReadConfig(dir); return err }},
		{"a lone safetensors file", 0, "extra.safetensors", func(dir string) error {
			os.Remove(filepath.Join(dir, SafetensorsFile))
			_, err := OpenSet(dir)
			return err
		}},
		{"the tokenizer", 0, tokenizer.FileName, func(dir string) error { _, err := ReadTokenizerFiles(dir); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			cfg := tinyConfig(false)
			files := map[string][]byte{tokenizer.FileName: []byte(`{"model":{}}`)}
			if err := Save(dir, cfg, RandomWeights(cfg, 1), SaveOptions{MaxShardBytes: tc.shard, Files: files}); err != nil {
				t.Fatal(err)
			}
			fifo := replaceByFIFO(t, dir, tc.fifo)
			err := fifotest.Within(t, func() error { return tc.open(dir) })
			if err == nil || !strings.Contains(err.Error(), fifo+": not a regular file (a named pipe)") {
				t.Errorf("error %v, want one naming %s as a named pipe", err, fifo)
			}
		})
	}
}

// replaceByFIFO makes the file of dir whose name begins with prefix (a
// new file if none does) a named pipe, and returns its path.
func replaceByFIFO(t *testing.T, dir, prefix string) string {
	t.Helper()
	path := filepath.Join(dir, prefix)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			path = filepath.Join(dir, e.Name())
			break
		}
	}
	return fifotest.Make(t, path)
}
