//go:build unix

package data

import (
	"errors"
	"github.com/memtrain/memtrain/internal/inputfile/fifotest"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// TestNonRegularInputs: an input named directly, a tokenizer or a file of
// a dataset that is a named pipe is an error naming it, before it is
// opened; the test fails rather than hangs if anything opens one.
func TestNonRegularInputs(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, dir string) (fifo string, err error)
	}{
		{"input file", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, "in.jsonl"))
			_, err := NewReader([]string{fifo}, ReadOptions{})
			return fifo, err
		}},
		{"input file, explicit format", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, "in"))
			_, err := NewReader([]string{fifo}, ReadOptions{Format: JSONL})
			return fifo, err
		}},
		{"link to an input file", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, "pipe"))
			link := filepath.Join(dir, "in.parquet")
			os.Symlink(fifo, link)
			_, err := NewReader([]string{link}, ReadOptions{})
			return link, err
		}},
		{"prepare", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, "in.txt"))
			_, err := Prepare(filepath.Join(dir, "ds"), []string{fifo}, llama2(t), PrepareConfig{SeqLen: 8})
			return fifo, err
		}},
		{"tokenizer.json", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, tokenizer.FileName))
			_, _, err := OpenTokenizer(fifo)
			return fifo, err
		}},
		{"tokenizer folder", func(t *testing.T, dir string) (string, error) {
			fifo := fifotest.Make(t, filepath.Join(dir, tokenizer.FileName))
			_, _, err := OpenTokenizer(dir)
			return fifo, err
		}},
		{"tokenizer_config.json", func(t *testing.T, dir string) (string, error) {
			_, files, err := OpenTokenizer("builtin:llama2")
			if err != nil {
				return "", err
			}
			os.WriteFile(filepath.Join(dir, tokenizer.FileName), files[tokenizer.FileName], 0o644)
			fifo := fifotest.Make(t, filepath.Join(dir, tokenizer.ConfigFileName))
			_, _, err = OpenTokenizer(dir)
			return fifo, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var fifo string
			err := fifotest.Within(t, func() error {
				var err error
				fifo, err = tc.run(t, dir)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), fifo+": not a regular file (a named pipe)") {
				t.Errorf("error %v, want one naming %s as a named pipe", err, fifo)
			}
		})
	}
}

// TestNonRegularStoreFiles: a dataset whose manifest, index or tokens are
// a named pipe does not open, and says which file.
func TestNonRegularStoreFiles(t *testing.T) {
	for _, name := range []string{ManifestFile, IndexFile, TokensFile} {
		t.Run(name, func(t *testing.T) {
			s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 4}, []int32{1, 2, 3})
			dir := s.Dir()
			s.Close()
			fifo := fifotest.Make(t, filepath.Join(dir, name))
			err := fifotest.Within(t, func() error {
				s, err := OpenStore(dir)
				if err == nil {
					s.Close()
				}
				return err
			})
			if err == nil || !strings.Contains(err.Error(), fifo+": not a regular file (a named pipe)") {
				t.Errorf("error %v, want one naming %s as a named pipe", err, fifo)
			}
		})
	}
}

// TestFolderWithNamedPipe: a named pipe in an input folder is skipped and
// reported (an error in strict mode), and the folder's files are read.
func TestFolderWithNamedPipe(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, dir, "a.jsonl", []string{"one", "two"})
	fifo := fifotest.Make(t, filepath.Join(dir, "b.jsonl"))
	var docs int
	err := fifotest.Within(t, func() error {
		r, err := NewReader([]string{dir}, ReadOptions{})
		if err != nil {
			return err
		}
		defer r.Close()
		for {
			if _, err := r.Next(); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			docs++
		}
		ps := r.Problems()
		if ps.Counts[SkippedFile] != 1 || len(ps.Examples) != 1 || ps.Examples[0].Source != fifo ||
			ps.Examples[0].Detail != "skipped: not a regular file (a named pipe)" {
			t.Errorf("problems %+v, want the named pipe skipped", ps)
		}
		return nil
	})
	if err != nil || docs != 2 {
		t.Errorf("read %d documents (%v), want 2", docs, err)
	}
	err = fifotest.Within(t, func() error {
		_, err := NewReader([]string{dir}, ReadOptions{Strict: true})
		return err
	})
	var re *RecordError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("strict: %v, want a record error for the named pipe", err)
	}
}
