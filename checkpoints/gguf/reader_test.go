package gguf

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// raw builds GGUF bytes by hand, for headers the writer would not write.
type raw struct{ bytes.Buffer }

func (r *raw) u32(v uint32) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) u64(v uint64) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }

// header starts a file: magic, version, counts.
func header(tensors, kvs uint64) *raw {
	r := &raw{}
	r.WriteString(Magic)
	return r.u32(Version).u64(tensors).u64(kvs)
}

// TestReadHostile: headers that declare more than the file holds, or what
// GGUF does not allow, are refused with one error naming the file and the
// field, before anything of the declared size is allocated.
func TestReadHostile(t *testing.T) {
	huge := uint64(1) << 62
	twice := header(0, 2) // a key given twice
	for range 2 {
		twice.str("k").u32(uint32(TypeUint8))
		twice.WriteByte(1)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "magic: 4 bytes past the end"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), `magic: "GGML" is not "GGUF"`},
		{"version", append([]byte(Magic), 2, 0, 0, 0), "version: 2 (want 3)"},
		{"tensor count", header(huge, 0).Bytes(), "tensor_count: 4611686018427387904 entries"},
		{"kv count", header(0, huge).Bytes(), "metadata_kv_count: 4611686018427387904 entries"},
		{"key length", header(0, 1).u64(huge).u64(0).Bytes(), "metadata[0].key: a string of 4611686018427387904 bytes past the end"},
		{"array length", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(huge).Bytes(),
			`metadata "k" (array length): 4611686018427387904 entries of at least 4 bytes cannot fit`},
		{"string array", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("a").u64(huge).Bytes(),
			`metadata "k"[1]: a string of 4611686018427387904 bytes`},
		{"nested array", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(0).Bytes(),
			`metadata "k": an array of type 9`},
		{"value type", header(0, 1).str("k").u32(13).u64(0).Bytes(), `metadata "k": value type 13`},
		{"bool", header(0, 1).str("k").u32(uint32(TypeBool)).u32(2).Bytes(), `metadata "k": bool 2`},
		{"twice", twice.Bytes(), `metadata "k": given twice`},
		{"alignment", header(0, 1).str("general.alignment").u32(uint32(TypeUint32)).u32(24).u64(0).Bytes(),
			`metadata "general.alignment": 24: want a power of two`},
		{"dims", header(1, 0).str("w").u32(5).u64(0).u64(0).u64(0).Bytes(), `tensor "w".n_dims: 5 (want 1 to 4)`},
		{"elements", header(1, 0).str("w").u32(2).u64(1 << 40).u64(1 << 40).u32(0).u64(0).Bytes(), `tensor "w".dims[1]: 1099511627776`},
		{"past the end", header(1, 0).str("w").u32(1).u64(1 << 20).u32(uint32(F32)).u64(0).Bytes(), `tensor "w": 4194304 bytes at data offset 0 run past the end`},
		{"blocks", header(1, 0).str("w").u32(1).u64(31).u32(uint32(Q8_0)).u64(0).Bytes(), `tensor "w": tensor "w": dimensions [31] are not whole Q8_0 blocks`},
		{"type", header(1, 0).str("w").u32(1).u64(1).u32(99).u64(0).Bytes(), `tensor "w": tensor "w": unknown type 99`},
	}
	for _, c := range cases {
		_, err := ReadHeader("bad.gguf", bytes.NewReader(c.b), int64(len(c.b)))
		if err == nil || !strings.HasPrefix(err.Error(), "gguf: bad.gguf: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming bad.gguf and %q", c.name, err, c.want)
		}
	}
}

// FuzzReadHeader reads arbitrary bytes as a GGUF header. Nothing may panic
// (nor allocate past the input's size, which the bounded counts ensure);
// errors name the file; a header that parses lists tensors whose data lies
// in the file, aligned, and writes back (WriteFile) to a file that reads
// back the same.
func FuzzReadHeader(f *testing.F) {
	seed := filepath.Join(f.TempDir(), "seed.gguf")
	kvs := []KV{{"general.architecture", "llama"}, {"n", uint32(3)}, {"xs", []string{"a", "bc"}}, {"fs", []float32{1, 2}}, {"b", true}}
	tensors := []TensorInfo{{Name: "a", Dims: []uint64{32, 2}, Type: Q8_0}, {Name: "b", Dims: []uint64{3}, Type: F32}}
	err := WriteFile(seed, kvs, tensors, func(i int, w io.Writer) error {
		n, _ := tensors[i].Bytes()
		_, err := w.Write(make([]byte, n))
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add(header(0, 0).Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ReadHeader("fuzz.gguf", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: fuzz.gguf: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, ti := range h.Tensors {
			n, err := ti.Bytes()
			if err != nil || ti.Offset%h.Alignment != 0 || h.DataOffset+int64(ti.Offset)+int64(n) > int64(len(data)) {
				t.Fatalf("tensor %q: %d bytes at %d (%v) outside the %d-byte file", ti.Name, n, ti.Offset, err, len(data))
			}
		}
		path := filepath.Join(t.TempDir(), "again.gguf")
		err = WriteFile(path, h.KVs, h.Tensors, func(i int, w io.Writer) error {
			n, _ := h.Tensors[i].Bytes()
			_, err := io.CopyN(w, bytes.NewReader(data[h.DataOffset+int64(h.Tensors[i].Offset):]), int64(n))
			return err
		})
		if err != nil {
			t.Fatalf("writing back: %v", err)
		}
		again, err := Read(path)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		if len(again.KVs) != len(h.KVs)+boolInt(!has(h, "general.alignment")) || len(again.Tensors) != len(h.Tensors) {
			t.Fatalf("read back %d values and %d tensors, want %d and %d", len(again.KVs), len(again.Tensors), len(h.KVs), len(h.Tensors))
		}
	})
}

func has(f *File, key string) bool { _, ok := f.Value(key); return ok }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
