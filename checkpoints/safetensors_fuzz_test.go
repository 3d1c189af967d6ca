package checkpoints

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzHeader opens arbitrary bytes as a safetensors file, from memory and
// through ReadAt, and reads every tensor it lists. Nothing may panic; the
// two ways of reading must agree; errors must name the file. The seed
// corpus in testdata/fuzz/FuzzHeader holds valid and broken files (see
// scripts/fixtures/make_fuzz_corpus.py).
func FuzzHeader(f *testing.F) {
	for _, tc := range stHeaderCases() {
		f.Add(tc.file)
	}
	for _, name := range []string{"torch-f16.safetensors", "torch-mixed.safetensors"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	const path = "fuzz.safetensors"
	f.Fuzz(func(t *testing.T, data []byte) {
		mem, err := newFileFromBytes(path, data)
		rd, err2 := newFileFromReaderAt(path, bytes.NewReader(data), int64(len(data)))
		if (err == nil) != (err2 == nil) {
			t.Fatalf("in memory: %v; with ReadAt: %v", err, err2)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoints: "+path+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		infos := mem.Tensors()
		if !slices.EqualFunc(infos, rd.Tensors(), func(a, b TensorInfo) bool {
			return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Offset == b.Offset && a.Size == b.Size
		}) {
			t.Fatalf("tensor lists differ")
		}
		var total int64
		for i, info := range infos {
			if i > 0 && infos[i-1].Name >= info.Name {
				t.Fatalf("tensors not sorted: %q, %q", infos[i-1].Name, info.Name)
			}
			if info.Offset < 8 || info.Size < 0 || info.Offset+info.Size > int64(len(data)) {
				t.Fatalf("tensor %q: bytes [%d, %d) outside the %d-byte file", info.Name, info.Offset, info.Offset+info.Size, len(data))
			}
			if info.Elements()*int64(info.DType.Size()) != info.Size {
				t.Fatalf("tensor %q: shape %v of %v, %d bytes", info.Name, info.Shape, info.DType, info.Size)
			}
			a, err := mem.ReadFloat32(info.Name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := rd.ReadFloat32(info.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
				t.Fatalf("tensor %q: in-memory and ReadAt reads differ", info.Name)
			}
			total += info.Size
			if len(info.Shape) == 2 {
				rows, cols := info.Shape[0], info.Shape[1]
				s, err := mem.ReadSlice(info.Name, rows/2, rows, cols/3, cols)
				if err != nil {
					t.Fatal(err)
				}
				if len(s) != (rows-rows/2)*(cols-cols/3) {
					t.Fatalf("tensor %q: slice of %d values", info.Name, len(s))
				}
				if len(s) > 0 && math.Float32bits(s[0]) != math.Float32bits(a[(rows/2)*cols+cols/3]) {
					t.Fatalf("tensor %q: slice differs from the full read", info.Name)
				}
				total += int64(len(s) * info.DType.Size())
			}
		}
		if mem.BytesRead() != total {
			t.Fatalf("BytesRead() = %d, want %d", mem.BytesRead(), total)
		}
		mem.Metadata()
		if err := mem.Close(); err != nil {
			t.Fatal(err)
		}
		if err := rd.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzIndex parses arbitrary bytes as a model.safetensors.index.json. A
// weight map it accepts must survive being written the way transformers
// writes it and parsed again.
func FuzzIndex(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "torch-tiny-llama-bf16-sharded", SafetensorsIndexFile)); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"metadata":{"total_size":8},"weight_map":{"a":"model.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x"}}`))
	f.Add([]byte(`{"weight_map":{"a":"x","a":"y"}}`))
	f.Add([]byte(`{"weight_map":{"\u00e9\n":"x.safetensors"}} `))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseIndex(data)
		if err != nil {
			return
		}
		for name, file := range m {
			if file == "" || filepath.Base(file) != file || strings.ContainsAny(file, `/\`) {
				t.Fatalf("tensor %q: accepted file name %q", name, file)
			}
		}
		again, err := parseIndex(appendIndex(nil, 0, m))
		if err != nil {
			t.Fatalf("re-parsing the written index: %v", err)
		}
		if !stMapsEqual(m, again) {
			t.Fatalf("weight map changed from %q to %q", m, again)
		}
	})
}
