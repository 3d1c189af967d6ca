package checkpoints

// Tests against fixtures PyTorch made; see testdata/README.md and
// scripts/fixtures/make_safetensors_fixtures.py.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// torchExpected is testdata/torch-expected.json.
type torchExpected struct {
	Sets          map[string]map[string]torchTensor // folder → tensor name → expectation
	Files         map[string]map[string]torchTensor // file → tensor name → expectation
	HFOrder       []string                          `json:"hf_order"`
	MaxShardBytes int64                             `json:"max_shard_bytes"`
}

// torchTensor is what reading a tensor must give: the float32 values that
// PyTorch's .to(torch.float32) gives, as bit patterns in hex.
type torchTensor struct {
	DType  string
	Shape  []int
	SHA256 string
	First  []string
	Values []string // all of them, for small tensors
}

func torchReadJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func torchHexBits(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// torchCheckTensor compares a tensor read as float32 with PyTorch's values.
func torchCheckTensor(t *testing.T, where string, info TensorInfo, got []float32, want torchTensor) {
	t.Helper()
	if info.DType.String() != want.DType || !slices.Equal(info.Shape, want.Shape) {
		t.Errorf("%s: %v %v, want %s %v", where, info.DType, info.Shape, want.DType, want.Shape)
	}
	le := make([]byte, 0, 4*len(got))
	for _, v := range got {
		le = binary.LittleEndian.AppendUint32(le, math.Float32bits(v))
	}
	if sum := sha256.Sum256(le); hex.EncodeToString(sum[:]) != want.SHA256 {
		t.Errorf("%s: sha256 of the float32 values differs from PyTorch's", where)
	}
	for _, list := range [][]string{want.First, want.Values} {
		if len(list) > len(got) {
			t.Errorf("%s: %d values, want at least %d", where, len(got), len(list))
			continue
		}
		for i, s := range list {
			if w := uint32(torchHexBits(t, s)); math.Float32bits(got[i]) != w {
				t.Errorf("%s: value %d = %#08x, PyTorch gives %#08x", where, i, math.Float32bits(got[i]), w)
			}
		}
	}
}

func TestTorchFixtures(t *testing.T) {
	var exp torchExpected
	torchReadJSON(t, "torch-expected.json", &exp)
	if len(exp.Sets) != 2 || len(exp.Files) != 2 {
		t.Fatalf("torch-expected.json: %d sets and %d files", len(exp.Sets), len(exp.Files))
	}
	for dir, tensors := range exp.Sets {
		s, err := OpenSet(filepath.Join("testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		if got := len(s.Tensors()); got != len(tensors) || got != len(exp.HFOrder) {
			t.Errorf("%s: %d tensors, want %d", dir, got, len(tensors))
		}
		for name, want := range tensors {
			info, ok := s.Tensor(name)
			if !ok {
				t.Errorf("%s: no tensor %q", dir, name)
				continue
			}
			got, err := s.ReadFloat32(name)
			if err != nil {
				t.Fatal(err)
			}
			torchCheckTensor(t, dir+": "+name, info, got, want)
		}
		s.Close()
	}
	for file, tensors := range exp.Files {
		for _, o := range stOpeners {
			f, err := o.open(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(f.Tensors()); got != len(tensors) {
				t.Errorf("%s: %d tensors, want %d", file, got, len(tensors))
			}
			for name, want := range tensors {
				info, ok := f.Tensor(name)
				if !ok {
					t.Errorf("%s: no tensor %q", file, name)
					continue
				}
				got, err := f.ReadFloat32(name)
				if err != nil {
					t.Fatal(err)
				}
				torchCheckTensor(t, file+": "+name, info, got, want)
			}
			f.Close()
		}
	}
}

// TestTorchMixedLayout checks the order in which the safetensors library
// lays out tensors of several dtypes: by alignment, largest first, then by
// name.
func TestTorchMixedLayout(t *testing.T) {
	f, err := OpenFile(filepath.Join("testdata", "torch-mixed.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	infos := f.Tensors()
	slices.SortFunc(infos, func(a, b TensorInfo) int {
		if a.Offset != b.Offset {
			return int(a.Offset - b.Offset)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var order []string
	for _, info := range infos {
		order = append(order, info.Name)
	}
	want := []string{"f32.matrix", "f32.vector", "a.f16.row", "bf16.empty", "bf16.matrix", "bf16.scalar", "f16.matrix"}
	if !slices.Equal(order, want) {
		t.Errorf("layout order %q, want %q", order, want)
	}
	if got := f.Metadata(); got["source"] != "torch" || got["format"] != "pt" {
		t.Errorf("Metadata() = %v", got)
	}
}

// TestTorchFixturesRewritten checks that WriteFile and WriteSet reproduce
// the PyTorch-made files byte for byte: the float32 file from its own
// values, and the bfloat16 shards and index by converting the float32
// values with Float32ToBF16 and sharding them as transformers does.
func TestTorchFixturesRewritten(t *testing.T) {
	var exp torchExpected
	torchReadJSON(t, "torch-expected.json", &exp)
	src, err := OpenSet(filepath.Join("testdata", "torch-tiny-llama"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var tensors []Tensor
	for _, name := range exp.HFOrder {
		info, _ := src.Tensor(name)
		data, err := src.ReadFloat32(name)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, Tensor{Name: name, Shape: info.Shape, Data: data})
	}

	dir := t.TempDir()
	files, err := WriteSet(dir, tensors, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, []string{SafetensorsFile}) {
		t.Errorf("WriteSet wrote %q", files)
	}
	stCompareFiles(t, filepath.Join(dir, SafetensorsFile), filepath.Join("testdata", "torch-tiny-llama", SafetensorsFile))

	dir = t.TempDir()
	files, err = WriteSet(dir, tensors, WriteOptions{DType: DTypeBF16, MaxShardBytes: exp.MaxShardBytes})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", SafetensorsIndexFile}
	if !slices.Equal(files, want) {
		t.Errorf("WriteSet wrote %q, want %q", files, want)
	}
	for _, name := range want {
		stCompareFiles(t, filepath.Join(dir, name), filepath.Join("testdata", "torch-tiny-llama-bf16-sharded", name))
	}
}

func stCompareFiles(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		t.Errorf("%s differs from %s at byte %d (lengths %d and %d)", got, want, i, len(g), len(w))
	}
}

// torchConversions is testdata/torch-conversions.json.
type torchConversions struct {
	Edges []struct {
		Name           string
		F32, BF16, F16 string
	}
	Samples map[string]json.RawMessage
	All16   struct {
		BF16SHA256 string `json:"bf16_sha256"`
		F16SHA256  string `json:"f16_sha256"`
	}
}

// TestTorchConversions checks the dtype conversions bit for bit against
// PyTorch's. PyTorch's NaN results depend on its code path (a vectorised
// conversion gives 0xffff), so NaNs are compared by class only.
func TestTorchConversions(t *testing.T) {
	var conv torchConversions
	torchReadJSON(t, "torch-conversions.json", &conv)
	if len(conv.Edges) < 40 {
		t.Fatalf("torch-conversions.json: only %d edge cases", len(conv.Edges))
	}
	for _, e := range conv.Edges {
		f := math.Float32frombits(uint32(torchHexBits(t, e.F32)))
		bf, hf := uint16(torchHexBits(t, e.BF16)), uint16(torchHexBits(t, e.F16))
		if got := Float32ToBF16(f); got != bf && !(isNaN16(got, 0x7f80) && isNaN16(bf, 0x7f80)) {
			t.Errorf("%s: Float32ToBF16(%s) = %#04x, PyTorch gives %#04x", e.Name, e.F32, got, bf)
		}
		if got := Float32ToF16(f); got != hf && !(isNaN16(got, 0x7c00) && isNaN16(hf, 0x7c00)) {
			t.Errorf("%s: Float32ToF16(%s) = %#04x, PyTorch gives %#04x", e.Name, e.F32, got, hf)
		}
		// Back to float32: PyTorch's narrow value, widened exactly.
		if got := math.Float32bits(BF16ToFloat32(bf)); got != uint32(bf)<<16 {
			t.Errorf("%s: BF16ToFloat32(%#04x) = %#08x", e.Name, bf, got)
		}
		if got, want := F16ToFloat32(hf), refF16Value(hf); !isNaN16(hf, 0x7c00) && float64(got) != want {
			t.Errorf("%s: F16ToFloat32(%#04x) = %g, want %g", e.Name, hf, got, want)
		}
	}

	// Samples of float32 bit patterns, as the script's formulas make them.
	samples := map[string]func(i, h uint32) uint32{
		"random":    func(i, h uint32) uint32 { return h + 12345 },
		"bf16_ties": func(i, h uint32) uint32 { return h&0xffff0000 | 0x8000 },
		"f16_ties":  func(i, h uint32) uint32 { return h&0xffffe000 | 0x1000 },
		"f16_range": func(i, h uint32) uint32 { return (i&1)<<31 | (101+(i>>1)%43)<<23 | h&0x7fffff },
	}
	for name, gen := range samples {
		var want struct {
			BF16 string `json:"bf16_sha256"`
			F16  string `json:"f16_sha256"`
		}
		if err := json.Unmarshal(conv.Samples[name], &want); err != nil || want.BF16 == "" {
			t.Fatalf("sample %s: %v", name, err)
		}
		var bf, hf []byte
		for i := range uint32(1 << 16) {
			f := math.Float32frombits(gen(i, i*2654435761))
			b, h := Float32ToBF16(f), Float32ToF16(f)
			if isNaN16(b, 0x7f80) {
				b = 0x7fc0
			}
			if isNaN16(h, 0x7c00) {
				h = 0x7e00
			}
			bf = binary.LittleEndian.AppendUint16(bf, b)
			hf = binary.LittleEndian.AppendUint16(hf, h)
		}
		if sum := sha256.Sum256(bf); hex.EncodeToString(sum[:]) != want.BF16 {
			t.Errorf("sample %s: Float32ToBF16 differs from PyTorch", name)
		}
		if sum := sha256.Sum256(hf); hex.EncodeToString(sum[:]) != want.F16 {
			t.Errorf("sample %s: Float32ToF16 differs from PyTorch", name)
		}
	}

	// Every 16-bit pattern to float32.
	var bf, hf []byte
	for i := range 1 << 16 {
		for _, c := range []struct {
			f   float32
			out *[]byte
		}{{BF16ToFloat32(uint16(i)), &bf}, {F16ToFloat32(uint16(i)), &hf}} {
			b := math.Float32bits(c.f)
			if math.IsNaN(float64(c.f)) {
				b = 0x7fc00000
			}
			*c.out = binary.LittleEndian.AppendUint32(*c.out, b)
		}
	}
	if sum := sha256.Sum256(bf); hex.EncodeToString(sum[:]) != conv.All16.BF16SHA256 {
		t.Errorf("BF16ToFloat32 differs from PyTorch on some bit pattern")
	}
	if sum := sha256.Sum256(hf); hex.EncodeToString(sum[:]) != conv.All16.F16SHA256 {
		t.Errorf("F16ToFloat32 differs from PyTorch on some bit pattern")
	}
}
