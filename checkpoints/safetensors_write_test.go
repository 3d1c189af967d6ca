package checkpoints

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestWriteFileLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "layout.safetensors")
	tensors := []Tensor{
		{Name: "b", Shape: []int{2}, Data: []float32{1, -2}},
		{Name: "a", Data: []float32{3}},
		{Name: "c/\"q\"\n", Shape: []int{0, 2}},
	}
	if err := WriteFile(path, tensors, DTypeBF16, map[string]string{"step": "7"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header := `{"__metadata__":{"format":"pt","step":"7"},` +
		`"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},` +
		`"b":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]},` +
		`"c/\"q\"\n":{"dtype":"BF16","shape":[0,2],"data_offsets":[6,6]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	want := stRaw(header, []byte{0x40, 0x40, 0x80, 0x3f, 0x00, 0xc0})
	if !bytes.Equal(b, want) {
		t.Errorf("file:\n%q\nwant:\n%q", b, want)
	}
	if n := binary.LittleEndian.Uint64(b); (8+n)%8 != 0 {
		t.Errorf("data starts at %d, not a multiple of 8", 8+n)
	}
}

func TestWriteFileMetadataOverridesFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, nil, DTypeF32, map[string]string{"format": "np"}); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Metadata(); len(got) != 1 || got["format"] != "np" {
		t.Errorf("Metadata() = %v", got)
	}
	if len(f.Tensors()) != 0 {
		t.Errorf("Tensors() = %v, want none", f.Tensors())
	}
}

func TestWriteLargeTensorStreams(t *testing.T) {
	// Larger than the write buffer, with an odd length.
	const n = 3<<18 + 5
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i) * 0.25
	}
	for _, d := range stDTypes {
		path := filepath.Join(t.TempDir(), "big.safetensors")
		if err := WriteFile(path, []Tensor{{Name: "w", Shape: []int{n}, Data: data}, {Name: "x", Shape: []int{1}, Data: []float32{5}}}, d, nil); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.ReadFloat32("w")
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(data))
		for i, v := range data {
			want[i] = roundTo(d, v)
		}
		if err := numtest.Equal(got, want); err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		if x, _ := f.ReadFloat32("x"); len(x) != 1 || x[0] != 5 {
			t.Errorf("%v: x = %v", d, x)
		}
		f.Close()
	}
}

// stAssertUntouched checks that dir holds exactly the file old.safetensors
// with contents old, and no temporary files.
func stAssertUntouched(t *testing.T, dir string, old []byte) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"old.safetensors"}) {
		t.Errorf("folder holds %q, want only old.safetensors", names)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "old.safetensors")); err != nil || !bytes.Equal(b, old) {
		t.Errorf("old.safetensors changed: %q, %v", b, err)
	}
}

func TestWriteFileErrors(t *testing.T) {
	good := func(name string) Tensor { return Tensor{Name: name, Shape: []int{2}, Data: []float32{1, 2}} }
	tests := []struct {
		name    string
		tensors []Tensor
		dtype   DType
		meta    map[string]string
		want    []string
	}{
		{"wrong data length in the middle", []Tensor{good("a"), {Name: "bad", Shape: []int{2, 3}, Data: make([]float32, 5)}, good("c")}, DTypeF32, nil,
			[]string{`tensor "bad"`, "5 values", "[2 3]", "want 6"}},
		{"data for an empty tensor", []Tensor{{Name: "e", Shape: []int{0, 3}, Data: []float32{1}}}, DTypeF32, nil, []string{`tensor "e"`}},
		{"scalar without data", []Tensor{{Name: "s"}}, DTypeBF16, nil, []string{`tensor "s"`, "want 1"}},
		{"duplicate", []Tensor{good("a"), good("b"), good("a")}, DTypeF32, nil, []string{`tensor "a"`, "duplicate"}},
		{"empty name", []Tensor{good("")}, DTypeF32, nil, []string{"empty name"}},
		{"metadata name", []Tensor{good("__metadata__")}, DTypeF32, nil, []string{`"__metadata__"`, "invalid name"}},
		{"invalid UTF-8 name", []Tensor{good("a\xff")}, DTypeF32, nil, []string{"invalid name"}},
		{"negative dimension", []Tensor{{Name: "n", Shape: []int{-2, -3}, Data: make([]float32, 6)}}, DTypeF32, nil, []string{`tensor "n"`, "negative"}},
		{"overflowing shape", []Tensor{{Name: "o", Shape: []int{math.MaxInt32, math.MaxInt32, math.MaxInt32}}}, DTypeF32, nil, []string{`tensor "o"`, "too large"}},
		{"invalid dtype", []Tensor{good("a")}, DType(5), nil, []string{"DType(5)"}},
		{"invalid UTF-8 metadata", []Tensor{good("a")}, DTypeF32, map[string]string{"k": "\xff"}, []string{`metadata "k"`, "UTF-8"}},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		path := filepath.Join(dir, "old.safetensors")
		old := []byte("earlier contents")
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(path, tt.tensors, tt.dtype, tt.meta)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		for _, w := range append(tt.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
		stAssertUntouched(t, dir, old)
	}
}

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	for i, d := range stDTypes {
		tensors := []Tensor{{Name: "w", Shape: []int{i + 1}, Data: make([]float32, i+1)}}
		if err := WriteFile(path, tensors, d, nil); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if info, _ := f.Tensor("w"); info.DType != d || info.Shape[0] != i+1 {
			t.Errorf("after writing %v: %+v", d, info)
		}
		f.Close()
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %v", entries)
	}
}
