package data

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var chatSettings = &ChatSettings{Template: "builtin:llama3", TemplateSHA256: "x"}

// buildMaskedStore writes a chat store of hand-made documents and masks.
func buildMaskedStore(t *testing.T, set Settings, docs [][]int32, masks [][]uint8) (*Store, string) {
	t.Helper()
	set.Chat = chatSettings
	dir := filepath.Join(t.TempDir(), "ds")
	w, err := CreateStore(dir, handTok, set)
	if err != nil {
		t.Fatal(err)
	}
	for i := range docs {
		if _, err := w.Add(Document{Source: "hand", Line: int64(i + 1), IDs: docs[i], Mask: masks[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// TestMaskedSequences checks that a chat dataset's weights are 1 exactly
// on the targets whose token the mask keeps, in both modes, across
// document boundaries and windows, with BOS (mask 0) and EOS (mask 1), and
// that the counts agree with the weights.
func TestMaskedSequences(t *testing.T) {
	docs := [][]int32{{10, 11, 12, 13, 14}, {20, 21, 22}, {30, 31, 32, 33, 34, 35, 36}}
	masks := [][]uint8{{0, 0, 1, 1, 0}, {1, 0, 1}, {0, 0, 0, 1, 1, 1, 1}}
	for _, mode := range []Mode{ModePack, ModeDocument} {
		for _, eos := range []bool{false, true} {
			set := Settings{Mode: mode, SeqLen: 4, BOS: true, EOS: eos}
			s, _ := buildMaskedStore(t, set, docs, masks)
			if v := s.Manifest().Version; v != MaskedVersion {
				t.Fatalf("version %d", v)
			}
			// The windows, with their masks, as the writer lays them out.
			type tok struct {
				id   int32
				keep uint8
			}
			var docToks [][]tok
			for i, d := range docs {
				dt := []tok{{1, 0}}
				for j, id := range d {
					dt = append(dt, tok{id, masks[i][j]})
				}
				if eos {
					dt = append(dt, tok{2, 1})
				}
				docToks = append(docToks, dt)
			}
			var windows [][]tok
			if mode == ModeDocument {
				for _, dt := range docToks {
					windows = append(windows, dt[:min(len(dt), 5)])
				}
			} else {
				var stream []tok
				for _, dt := range docToks {
					stream = append(stream, dt...)
				}
				for start := 0; start+1 < len(stream); start += 4 {
					windows = append(windows, stream[start:min(len(stream), start+5)])
				}
			}
			var c Counts
			seqs := sequences(t, s, Train)
			if len(seqs) != len(windows) {
				t.Fatalf("%s: %d sequences, want %d", mode, len(seqs), len(windows))
			}
			for i, q := range seqs {
				c.Sequences++
				for k := range q.weights {
					want, target := float32(0), s.Manifest().Settings.PadID
					if k+1 < len(windows[i]) {
						want, target = float32(windows[i][k+1].keep), windows[i][k+1].id
					}
					if q.weights[k] != want || q.targets[k] != target {
						t.Errorf("%s eos=%v: sequence %d position %d: target %d weight %v, want %d %v", mode, eos, i, k, q.targets[k], q.weights[k], target, want)
					}
					if q.weights[k] == 1 {
						c.Targets++
					}
				}
			}
			got := s.Manifest().Splits.Train.Counts
			if got.Targets != c.Targets || got.Sequences != c.Sequences || got.Targets+got.Masked+got.Padding != got.Sequences*4 || got.Masked == 0 {
				t.Errorf("%s eos=%v: counts %+v, weights %d targets in %d sequences", mode, eos, got, c.Targets, c.Sequences)
			}
		}
	}
}

func TestMaskedStoreErrors(t *testing.T) {
	set := Settings{Mode: ModePack, SeqLen: 4}
	// A mask for a plain dataset, or of the wrong length, or not 0/1.
	w, err := CreateStore(filepath.Join(t.TempDir(), "a"), handTok, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(Document{Source: "x", Line: 1, IDs: []int32{5}, Mask: []uint8{1}}); err == nil || !strings.Contains(err.Error(), "x:1: a loss mask") {
		t.Errorf("mask on a plain dataset: %v", err)
	}
	w.Abort()
	set.Chat = chatSettings
	w, err = CreateStore(filepath.Join(t.TempDir(), "b"), handTok, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(Document{Source: "x", Line: 2, IDs: []int32{5, 6}, Mask: []uint8{1}}); err == nil || !strings.Contains(err.Error(), "x:2: loss mask of 1 tokens for 2 ids") {
		t.Errorf("short mask: %v", err)
	}
	if _, err := w.Add(Document{Source: "x", Line: 3, IDs: []int32{5}, Mask: []uint8{2}}); err == nil || !strings.Contains(err.Error(), "value 2") {
		t.Errorf("mask value 2: %v", err)
	}
	w.Abort()

	// Corruption of mask.bin, and a masked dataset read as a plain one.
	for _, c := range []struct {
		name, file string
		edit       func([]byte) []byte
		want       string
	}{
		{"flipped", MaskFile, func(b []byte) []byte { b[headerSize] ^= 1; return b }, "mask.bin: checksum mismatch"},
		{"truncated", MaskFile, func(b []byte) []byte { return b[:len(b)-1] }, "mask.bin: truncated or corrupt"},
		{"magic", MaskFile, func(b []byte) []byte { b[0] = 'X'; return b }, "mask.bin: not a memtrain loss mask"},
		{"missing", MaskFile, nil, "mask.bin"},
		{"version 1", ManifestFile, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"version": 2`), []byte(`"version": 1`), 1)
		}, "settings.chat is set but version 1 has no loss mask"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, dir := buildMaskedStore(t, Settings{Mode: ModePack, SeqLen: 4}, [][]int32{{5, 6, 7}}, [][]uint8{{0, 1, 1}})
			p := filepath.Join(dir, c.file)
			if c.edit == nil {
				os.Remove(p)
			} else {
				b, _ := os.ReadFile(p)
				os.WriteFile(p, c.edit(b), 0o644)
			}
			if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestPlainManifestUnchanged checks that a dataset without a mask is
// written as before masks: version 1, no mask.bin, no chat or masked keys.
func TestPlainManifestUnchanged(t *testing.T) {
	s := buildStore(t, Settings{Mode: ModePack, SeqLen: 4}, []int32{5, 6, 7})
	b, err := os.ReadFile(filepath.Join(s.Dir(), ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["version"] != 1.0 || strings.Contains(string(b), `"chat"`) || strings.Contains(string(b), `"masked"`) {
		t.Errorf("plain manifest: %s", b)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), MaskFile)); err == nil {
		t.Error("plain dataset has mask.bin")
	}
	if m, err := s.DocMask(0); s.HasMask() || m != nil || err != nil {
		t.Errorf("plain dataset: HasMask %v, DocMask %v (%v)", s.HasMask(), m, err)
	}
}

// TestDocMask: a chat dataset's DocMask is each document's mask as
// DocTokens's tokens, BOS 0 and EOS 1 included; out of range is an error.
func TestDocMask(t *testing.T) {
	docs := [][]int32{{10, 11, 12}, {20, 21}}
	masks := [][]uint8{{0, 1, 1}, {1, 0}}
	s, _ := buildMaskedStore(t, Settings{Mode: ModeDocument, SeqLen: 4, BOS: true, EOS: true}, docs, masks)
	if !s.HasMask() {
		t.Fatal("chat dataset: HasMask false")
	}
	for id, want := range [][]uint8{{0, 0, 1, 1, 1}, {0, 1, 0, 1}} {
		got, err := s.DocMask(id)
		ids, _ := s.DocTokens(id)
		if err != nil || !bytes.Equal(got, want) || len(got) != len(ids) {
			t.Errorf("document %d: mask %v (%v), want %v for %d tokens", id, got, err, want, len(ids))
		}
	}
	if _, err := s.DocMask(2); err == nil {
		t.Error("document 2 of 2: no error")
	}
}
