package checkpoints

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// stDTypes are the dtypes every read and write test covers.
var stDTypes = []DType{DTypeF32, DTypeBF16, DTypeF16}

// stRaw assembles a safetensors file from a header and a data section.
func stRaw(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// stWrite writes b to a file called name in a new temporary folder and
// returns its path.
func stWrite(t testing.TB, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// stOpeners open a file memory-mapped and with ReadAt.
var stOpeners = []struct {
	name string
	open func(string) (*File, error)
}{
	{"mmap", OpenFile},
	{"readat", func(p string) (*File, error) { return openFile(p, false) }},
}

// stRandom returns a tensor of random values, some of them special.
func stRandom(rng *rand.Rand, name string, shape ...int) Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	return Tensor{Name: name, Shape: shape, Data: data}
}

// stSpecial holds values that exercise rounding and special cases.
var stSpecial = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1,
	math.Float32frombits(0x3f808000), // bfloat16 tie, rounds down to even
	math.Float32frombits(0x3f818000), // bfloat16 tie, rounds up to even
	math.Float32frombits(0x3f801000), // binary16 tie, rounds down to even
	math.Float32frombits(0x3f803000), // binary16 tie, rounds up to even
	math.MaxFloat32, -math.MaxFloat32, 65504, 65520, 1e-7, 0x1p-25, 0x3p-25,
	math.Float32frombits(1), math.Float32frombits(0x007fffff),
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	math.Float32frombits(0xffc00000), math.Float32frombits(0x7f800001),
}

func stTestTensors(rng *rand.Rand) []Tensor {
	return []Tensor{
		stRandom(rng, "matrix", 7, 11),
		{Name: "special", Shape: []int{len(stSpecial)}, Data: stSpecial},
		{Name: "scalar", Shape: []int{}, Data: []float32{2.75}},
		{Name: "scalar.nil.shape", Data: []float32{-1.5}},
		{Name: "empty.rows", Shape: []int{0, 3}, Data: []float32{}},
		{Name: "empty.cols", Shape: []int{4, 0}},
		{Name: "empty", Shape: []int{0}},
		stRandom(rng, "cube", 2, 3, 4),
		stRandom(rng, "a.first.in.order", 1),
		stRandom(rng, "z.row", 1, 17),
	}
}

// stBits checks a tensor's values read back bit for bit (numtest.Equal).
// An empty tensor or slice is data here, not a comparison of nothing: it
// must read back empty.
func stBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(want) == 0 {
		if len(got) != 0 {
			t.Fatalf("%s: got %d values, want none", what, len(got))
		}
		return
	}
	if err := numtest.Equal(got, want); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tensors := stTestTensors(rng)
	for _, d := range stDTypes {
		path := filepath.Join(t.TempDir(), "rt.safetensors")
		meta := map[string]string{"step": "100", "note": "quote \" and\nnewline, ünïcode"}
		if err := WriteFile(path, tensors, d, meta); err != nil {
			t.Fatal(err)
		}
		for _, o := range stOpeners {
			t.Run(d.String()+"/"+o.name, func(t *testing.T) {
				f, err := o.open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if f.Path() != path {
					t.Errorf("Path() = %q, want %q", f.Path(), path)
				}
				wantMeta := map[string]string{"format": "pt", "step": "100", "note": meta["note"]}
				if got := f.Metadata(); !stMapsEqual(got, wantMeta) {
					t.Errorf("Metadata() = %v, want %v", got, wantMeta)
				}
				infos := f.Tensors()
				if len(infos) != len(tensors) {
					t.Fatalf("%d tensors, want %d", len(infos), len(tensors))
				}
				if !slices.IsSortedFunc(infos, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) }) {
					t.Errorf("Tensors() not sorted by name")
				}
				var total int64
				for _, tt := range tensors {
					info, ok := f.Tensor(tt.Name)
					if !ok {
						t.Fatalf("tensor %q missing", tt.Name)
					}
					wantShape := tt.Shape
					if wantShape == nil {
						wantShape = []int{}
					}
					if info.Name != tt.Name || info.DType != d || !slices.Equal(info.Shape, wantShape) ||
						info.Size != int64(len(tt.Data)*d.Size()) || info.Elements() != int64(len(tt.Data)) {
						t.Errorf("Tensor(%q) = %+v", tt.Name, info)
					}
					want := make([]float32, len(tt.Data))
					for i, v := range tt.Data {
						want[i] = roundTo(d, v)
					}
					got, err := f.ReadFloat32(tt.Name)
					if err != nil {
						t.Fatal(err)
					}
					stBits(t, tt.Name, got, want)
					into := make([]float32, len(want))
					if err := f.ReadFloat32Into(tt.Name, into); err != nil {
						t.Fatal(err)
					}
					stBits(t, tt.Name+" (into)", into, want)
					total += 2 * info.Size
				}
				if got := f.BytesRead(); got != total {
					t.Errorf("BytesRead() = %d, want %d", got, total)
				}
			})
		}
	}
}

func stMapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestTensorsAreCopies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := WriteFile(path, []Tensor{{Name: "w", Shape: []int{2, 2}, Data: make([]float32, 4)}}, DTypeF32, nil); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Tensors()[0].Shape[0] = 99
	info, _ := f.Tensor("w")
	info.Shape[1] = 99
	f.Metadata()["format"] = "changed"
	if info, _ := f.Tensor("w"); !slices.Equal(info.Shape, []int{2, 2}) {
		t.Errorf("shape changed to %v through a returned TensorInfo", info.Shape)
	}
	if f.Metadata()["format"] != "pt" {
		t.Errorf("metadata changed through the returned map")
	}
}

func TestReadSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tensors := []Tensor{
		stRandom(rng, "m", 13, 21),
		stRandom(rng, "one", 1, 1),
		stRandom(rng, "row", 1, 40),
		stRandom(rng, "col", 40, 1),
		{Name: "norows", Shape: []int{0, 5}},
		{Name: "nocols", Shape: []int{6, 0}},
	}
	for _, d := range stDTypes {
		path := filepath.Join(t.TempDir(), "slice.safetensors")
		if err := WriteFile(path, tensors, d, nil); err != nil {
			t.Fatal(err)
		}
		for _, o := range stOpeners {
			t.Run(d.String()+"/"+o.name, func(t *testing.T) {
				f, err := o.open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				for _, tt := range tensors {
					full, err := f.ReadFloat32(tt.Name)
					if err != nil {
						t.Fatal(err)
					}
					rows, cols := tt.Shape[0], tt.Shape[1]
					rects := [][4]int{
						{0, rows, 0, cols},         // everything
						{0, 0, 0, 0},               // empty
						{rows, rows, cols, cols},   // empty, at the far corner
						{0, rows, cols, cols},      // no columns
						{rows / 2, rows, 0, cols},  // whole rows
						{0, rows, cols / 2, cols},  // right half
						{rows / 3, rows / 2, 0, 0}, // rows without columns
					}
					if rows > 0 && cols > 0 {
						rects = append(rects, [4]int{rows - 1, rows, cols - 1, cols}, [4]int{0, 1, 0, 1})
					}
					for range 30 {
						r0 := rng.IntN(rows + 1)
						r1 := r0 + rng.IntN(rows-r0+1)
						c0 := rng.IntN(cols + 1)
						c1 := c0 + rng.IntN(cols-c0+1)
						rects = append(rects, [4]int{r0, r1, c0, c1})
					}
					for _, r := range rects {
						before := f.BytesRead()
						got, err := f.ReadSlice(tt.Name, r[0], r[1], r[2], r[3])
						if err != nil {
							t.Fatalf("ReadSlice(%q, %v): %v", tt.Name, r, err)
						}
						var want []float32
						for i := r[0]; i < r[1]; i++ {
							want = append(want, full[i*cols+r[2]:i*cols+r[3]]...)
						}
						if want == nil {
							want = []float32{}
						}
						stBits(t, fmt.Sprintf("%s%v", tt.Name, r), got, want)
						if n, want := f.BytesRead()-before, int64(len(want)*d.Size()); n != want {
							t.Errorf("ReadSlice(%q, %v) read %d bytes, want %d", tt.Name, r, n, want)
						}
					}
				}
			})
		}
	}
}

func TestReadErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "errs.safetensors")
	tensors := []Tensor{
		{Name: "m", Shape: []int{3, 4}, Data: make([]float32, 12)},
		{Name: "v", Shape: []int{5}, Data: make([]float32, 5)},
		{Name: "s", Data: []float32{1}},
	}
	if err := WriteFile(path, tensors, DTypeBF16, nil); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		read func() error
		want []string
	}{
		{"slice rows past the end", func() error { _, err := f.ReadSlice("m", 0, 4, 0, 4); return err }, []string{`"m"`, "[0:4, 0:4]", "[3 4]"}},
		{"slice cols past the end", func() error { _, err := f.ReadSlice("m", 0, 3, 2, 5); return err }, []string{`"m"`, "[3 4]"}},
		{"slice negative", func() error { _, err := f.ReadSlice("m", -1, 2, 0, 4); return err }, []string{`"m"`, "[3 4]"}},
		{"slice reversed rows", func() error { _, err := f.ReadSlice("m", 2, 1, 0, 4); return err }, []string{`"m"`, "[3 4]"}},
		{"slice reversed cols", func() error { _, err := f.ReadSlice("m", 0, 1, 3, 2); return err }, []string{`"m"`, "[3 4]"}},
		{"slice of 1-D", func() error { _, err := f.ReadSlice("v", 0, 1, 0, 1); return err }, []string{`"v"`, "2-D", "[5]"}},
		{"slice of scalar", func() error { _, err := f.ReadSlice("s", 0, 0, 0, 0); return err }, []string{`"s"`, "2-D", "[]"}},
		{"slice of missing", func() error { _, err := f.ReadSlice("nope", 0, 0, 0, 0); return err }, []string{`"nope"`, "not found"}},
		{"read missing", func() error { _, err := f.ReadFloat32("nope"); return err }, []string{`"nope"`, "not found"}},
		{"into missing", func() error { return f.ReadFloat32Into("nope", nil) }, []string{`"nope"`, "not found"}},
		{"into too short", func() error { return f.ReadFloat32Into("m", make([]float32, 11)) }, []string{`"m"`, "11", "12"}},
		{"into too long", func() error { return f.ReadFloat32Into("m", make([]float32, 13)) }, []string{`"m"`, "13", "12"}},
	}
	for _, tt := range tests {
		err := tt.read()
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		for _, w := range append(tt.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
	}
	if _, err := f.ReadFloat32("nope"); !errors.Is(err, ErrTensorNotFound) {
		t.Errorf("missing tensor: error %v is not ErrTensorNotFound", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close: %v, want os.ErrClosed", err)
	}
	if _, err := f.ReadFloat32("m"); !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFloat32 after Close: %v", err)
	}
	if _, err := f.ReadSlice("m", 0, 1, 0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadSlice after Close: %v", err)
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFile(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenFile(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("folder: %v", err)
	}
}

// stHeaderCase is a hand-made file that OpenFile must reject (or accept,
// when want is nil).
type stHeaderCase struct {
	name string
	file []byte
	want []string // substrings of the error; nil means the file is valid
}

func stHeaderCases() []stHeaderCase {
	h := func(header string, dataLen int) []byte { return stRaw(header, make([]byte, dataLen)) }
	bad := func(name, header string, dataLen int, want ...string) stHeaderCase {
		return stHeaderCase{name, h(header, dataLen), want}
	}
	ok := func(name, header string, dataLen int) stHeaderCase {
		return stHeaderCase{name, h(header, dataLen), nil}
	}
	lengthOnly := binary.LittleEndian.AppendUint64(nil, 1000)
	return []stHeaderCase{
		{"empty file", nil, []string{"0 bytes", "too short"}},
		{"seven bytes", []byte{1, 0, 0, 0, 0, 0, 0}, []string{"7 bytes", "too short"}},
		{"header length beyond the file", append(lengthOnly, "{}"...), []string{"header length 1000", "exceeds"}},
		{"header length huge", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), []string{"exceeds"}},
		bad("empty header", "", 0, "not valid JSON"),
		bad("not JSON", "{nope", 0, "not valid JSON"),
		bad("truncated JSON", `{"w":{"dtype":"F32"`, 0, "not valid JSON"),
		bad("array", "[]", 0, "not a JSON object"),
		bad("string", `"x"`, 0, "not a JSON object"),
		bad("trailing data", `{} {}`, 0, "trailing data"),
		bad("trailing garbage", `{}x`, 0, "trailing data"),
		bad("invalid UTF-8", "{\"w\xff\":1}", 0, "UTF-8"),
		bad("duplicate tensor", `{"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[],"data_offsets":[4,8]}}`, 8, "duplicate", `"w"`),
		bad("entry not an object", `{"w":5}`, 0, `tensor "w"`, "not a JSON object"),
		bad("entry null", `{"w":null}`, 0, `tensor "w"`, "not a JSON object"),
		bad("missing dtype", `{"w":{"shape":[1],"data_offsets":[0,4]}}`, 4, `tensor "w"`, "dtype"),
		bad("null dtype", `{"w":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, 4, `tensor "w"`, "dtype"),
		bad("missing shape", `{"w":{"dtype":"F32","data_offsets":[0,4]}}`, 4, `tensor "w"`, "shape"),
		bad("missing data_offsets", `{"w":{"dtype":"F32","shape":[1]}}`, 4, `tensor "w"`, "data_offsets"),
		bad("dtype not a string", `{"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}}`, 4, `tensor "w"`, "dtype 32"),
		bad("unknown dtype", `{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, 4, `tensor "w"`, `unknown dtype "F33"`, "F32, BF16, F16"),
		bad("lower-case dtype", `{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, 4, `tensor "w"`, `unknown dtype "f32"`),
		bad("F64", `{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, 8, `tensor "w"`, `unsupported dtype "F64"`, "F32, BF16, F16"),
		bad("I64", `{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8, `tensor "ids"`, `unsupported dtype "I64"`),
		bad("U8", `{"q":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 4, `tensor "q"`, `unsupported dtype "U8"`),
		bad("negative dimension", `{"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}}`, 0, `tensor "w"`, "negative dimension -1"),
		bad("fractional dimension", `{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4, `tensor "w"`, "shape [1.5]"),
		bad("shape not an array", `{"w":{"dtype":"F32","shape":4,"data_offsets":[0,16]}}`, 16, `tensor "w"`, "shape 4"),
		bad("dimension beyond int64", `{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}}`, 4, `tensor "w"`, "shape"),
		bad("size mismatch", `{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, 24, `tensor "w"`, "needs 24 bytes", "hold 20"),
		bad("size mismatch bf16", `{"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}}`, 24, `tensor "w"`, "needs 12 bytes"),
		bad("shape overflows", `{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0, `tensor "w"`, "too large"),
		bad("shape overflows to the right size", `{"w":{"dtype":"F32","shape":[4611686018427387905,4],"data_offsets":[0,16]}}`, 16, `tensor "w"`, "too large"),
		bad("begin after end", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, 8, `tensor "w"`, "begin is after end"),
		bad("negative offset", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, 8, `tensor "w"`, "negative data_offsets"),
		bad("one offset", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4, `tensor "w"`, "data_offsets [0]"),
		bad("three offsets", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 8, `tensor "w"`, "data_offsets"),
		bad("offsets beyond the data", `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4, `tensor "w"`, "beyond the 4-byte data section"),
		bad("offset beyond int64", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}}`, 4, `tensor "w"`, "data_offsets"),
		bad("overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12, `"a"`, `"b"`, "overlap"),
		bad("same offsets", `{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4, `"a"`, `"b"`, "overlap"),
		bad("metadata not strings", `{"__metadata__":{"format":"pt","step":1}}`, 0, "__metadata__", "not an object of strings"),
		bad("metadata array", `{"__metadata__":["pt"]}`, 0, "__metadata__"),
		bad("metadata string", `{"__metadata__":"pt"}`, 0, "__metadata__"),
		ok("empty header", `{}`, 0),
		ok("padded header", `{}      `, 0),
		ok("metadata only", `{"__metadata__":{"format":"pt"}}`, 0),
		ok("null metadata", `{"__metadata__":null}`, 0),
		ok("scalar", `{"s":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, 2),
		ok("empty tensors", `{"e":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]},"f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"g":{"dtype":"BF16","shape":[3,0,2],"data_offsets":[8,8]}}`, 8),
		ok("empty tensor with a huge dimension", `{"e":{"dtype":"F32","shape":[0,2147483647],"data_offsets":[0,0]}}`, 0),
		ok("gap and unsorted offsets", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 20),
		ok("extra fields", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":true}}`, 4),
		ok("whitespace", " { \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 4 ] } } \n", 4),
	}
}

func TestHeaderValidation(t *testing.T) {
	for _, tc := range stHeaderCases() {
		path := stWrite(t, "case.safetensors", tc.file)
		for _, o := range stOpeners {
			f, err := o.open(path)
			if tc.want == nil {
				if err != nil {
					t.Errorf("%s (%s): %v", tc.name, o.name, err)
					continue
				}
				for _, info := range f.Tensors() {
					if _, err := f.ReadFloat32(info.Name); err != nil {
						t.Errorf("%s (%s): %v", tc.name, o.name, err)
					}
				}
				f.Close()
				continue
			}
			if err == nil {
				f.Close()
				t.Errorf("%s (%s): no error", tc.name, o.name)
				continue
			}
			if o.name == "mmap" {
				t.Logf("%s: %v", tc.name, err)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s (%s): error %q does not mention %q", tc.name, o.name, err, w)
				}
			}
		}
	}
}

func TestHeaderTooLarge(t *testing.T) {
	// A sparse file larger than the header limit, whose header length
	// claims all of it.
	path := filepath.Join(t.TempDir(), "huge.safetensors")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = maxHeaderSize + 1
	if _, err := f.Write(binary.LittleEndian.AppendUint64(nil, n)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 + n); err != nil {
		t.Skip("cannot make a large sparse file:", err)
	}
	f.Close()
	_, err = OpenFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("OpenFile: %v, want a header size limit error", err)
	}
}

func TestTruncatedAfterOpen(t *testing.T) {
	// With ReadAt, a file that shrinks after OpenFile gives an error, not a
	// panic.
	path := filepath.Join(t.TempDir(), "t.safetensors")
	if err := WriteFile(path, []Tensor{{Name: "w", Shape: []int{64, 64}, Data: make([]float32, 64*64)}}, DTypeF32, nil); err != nil {
		t.Fatal(err)
	}
	f, err := openFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFloat32("w"); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("ReadFloat32 of a truncated file: %v", err)
	}
	if _, err := f.ReadSlice("w", 60, 64, 3, 5); err == nil {
		t.Errorf("ReadSlice of a truncated file: no error")
	}
}

func BenchmarkReadSlice(b *testing.B) {
	// One rank's share of a 4096×4096 bf16 matrix: a quarter of the columns
	// (row by row), or a quarter of the rows (contiguous).
	const n = 4096
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	if err := WriteFile(path, []Tensor{{Name: "w", Shape: []int{n, n}, Data: make([]float32, n*n)}}, DTypeBF16, nil); err != nil {
		b.Fatal(err)
	}
	for _, o := range stOpeners {
		f, err := o.open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(o.name+"/columns", func(b *testing.B) {
			b.SetBytes(n * n / 4 * 2)
			for b.Loop() {
				if _, err := f.ReadSlice("w", 0, n, n/4, n/2); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(o.name+"/rows", func(b *testing.B) {
			b.SetBytes(n * n / 4 * 2)
			for b.Loop() {
				if _, err := f.ReadSlice("w", n/4, n/2, 0, n); err != nil {
					b.Fatal(err)
				}
			}
		})
		f.Close()
	}
}

func TestConcurrentReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	tensors := []Tensor{stRandom(rng, "a", 64, 33), stRandom(rng, "b", 100)}
	dir := t.TempDir()
	if _, err := WriteSet(dir, tensors, WriteOptions{DType: DTypeBF16, MaxShardBytes: 300}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want, _ := s.ReadSlice("a", 8, 16, 0, 33)
	done := make(chan error)
	for g := range 8 {
		go func() {
			for range 20 {
				got, err := s.ReadSlice("a", 8, 16, 0, 33)
				if err == nil && !slices.Equal(got, want) {
					err = fmt.Errorf("goroutine %d: slice differs", g)
				}
				if err == nil {
					_, err = s.ReadFloat32("b")
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if got, want := s.BytesRead(), int64(8*33*2+8*20*(8*33*2+100*2)); got != want {
		t.Errorf("BytesRead() = %d, want %d", got, want)
	}
}
