package checkpoints

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/memtrain/memtrain/internal/atomicfile"
)

// File names of a checkpoint's weights, as HuggingFace transformers writes
// them.
const (
	SafetensorsFile      = "model.safetensors"
	SafetensorsIndexFile = "model.safetensors.index.json"
)

// A Tensor is a named tensor of float32 values, row-major.
type Tensor struct {
	Name  string
	Shape []int // [] or nil for a scalar
	Data  []float32
}

// WriteOptions control how WriteSet writes a checkpoint's weights.
type WriteOptions struct {
	// DType is the storage type of every tensor; the zero value is F32.
	DType DType

	// MaxShardBytes, when positive, splits weights larger than this many
	// bytes into shards as HuggingFace transformers does: tensors are taken
	// in the order given and a new shard starts when the next tensor would
	// push the current one over the limit; a tensor larger than the limit
	// gets a shard of its own.
	MaxShardBytes int64

	// Metadata is added to the "__metadata__" of every file written,
	// beside "format": "pt", which it may override.
	Metadata map[string]string

	// Sums, if not nil, receives the FileSum of every file written, by
	// file name, hashed as the bytes are written.
	Sums map[string]FileSum
}

// WriteFile writes tensors to a safetensors file at path, converting them
// to dtype, atomically: through a temporary file in the same folder and a
// rename, so that readers, and the file system after a crash, see the old
// file or the complete new one.
//
// The file is laid out as the Python safetensors library lays it out: the
// header is compact JSON whose "__metadata__" holds {"format": "pt"} merged
// with metadata, followed by the tensors sorted by name, padded with spaces
// so that the data starts at a multiple of 8 bytes; the tensors' data
// follows in the same order. For tensors of one dtype the library writes
// identical bytes.
//
// Every tensor must have a unique, non-empty name and exactly as many values
// as its shape implies; otherwise WriteFile fails without touching path.
func WriteFile(path string, tensors []Tensor, dtype DType, metadata map[string]string) error {
	if err := checkWrite(path, tensors, dtype, metadata); err != nil {
		return err
	}
	return writeSafetensors(path, tensors, dtype, metadata, nil)
}

// WriteFileSum is WriteFile that also returns the size and SHA-256 of the
// bytes written, hashed on the way to the file.
func WriteFileSum(path string, tensors []Tensor, dtype DType, metadata map[string]string) (FileSum, error) {
	if err := checkWrite(path, tensors, dtype, metadata); err != nil {
		return FileSum{}, err
	}
	var sum FileSum
	err := writeSafetensors(path, tensors, dtype, metadata, &sum)
	return sum, err
}

// checkWrite validates the arguments of a write, naming path in errors.
func checkWrite(path string, tensors []Tensor, dtype DType, metadata map[string]string) error {
	specs := make([]StreamTensor, len(tensors))
	for i, t := range tensors {
		specs[i] = StreamTensor{Name: t.Name, Shape: t.Shape}
	}
	if err := checkHeader(path, specs, dtype, metadata); err != nil {
		return err
	}
	for _, t := range tensors {
		n, _ := shapeElements(t.Shape)
		if uint64(len(t.Data)) != n {
			return fmt.Errorf("checkpoints: %s: tensor %q: %d values for shape %v, want %d", path, t.Name, len(t.Data), t.Shape, n)
		}
	}
	return nil
}

// checkHeader validates what the header of a file to write says: the
// dtype, the metadata, and unique valid names with valid shapes.
func checkHeader(path string, tensors []StreamTensor, dtype DType, metadata map[string]string) error {
	if !dtype.valid() {
		return fmt.Errorf("checkpoints: %s: cannot write %v (supported: F32, BF16, F16)", path, dtype)
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("checkpoints: %s: metadata %q: not valid UTF-8", path, k)
		}
	}
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		switch {
		case t.Name == "":
			return fmt.Errorf("checkpoints: %s: a tensor has an empty name", path)
		case t.Name == metadataKey || !utf8.ValidString(t.Name):
			return fmt.Errorf("checkpoints: %s: tensor %q: invalid name", path, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("checkpoints: %s: tensor %q: duplicate name", path, t.Name)
		}
		seen[t.Name] = true
		if _, err := shapeElements(t.Shape); err != nil {
			return fmt.Errorf("checkpoints: %s: tensor %q: %w", path, t.Name, err)
		}
	}
	return nil
}

// shapeElements returns the number of elements of a shape, checking for
// negative dimensions and overflow.
func shapeElements(shape []int) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n = lo
	}
	return n, nil
}

// writeSafetensors writes a checked set of tensors to path atomically and,
// if sum is not nil, sets it to the written file's FileSum.
func writeSafetensors(path string, tensors []Tensor, dtype DType, metadata map[string]string, sum *FileSum) error {
	specs := make([]StreamTensor, len(tensors))
	for i, t := range tensors {
		specs[i] = StreamTensor{Name: t.Name, Shape: t.Shape}
	}
	s, err := writeStream(path, specs, dtype, metadata, sum != nil, func(i int, put func([]float32) error) error {
		return put(tensors[i].Data)
	})
	if err == nil && sum != nil {
		*sum = s
	}
	return err
}

// appendHeader appends the JSON header for tensors, in the order given and
// stored back to back, padded with spaces to a multiple of 8 bytes.
func appendHeader(b []byte, tensors []*StreamTensor, dtype DType, metadata map[string]string) []byte {
	start := len(b)
	meta := map[string]string{"format": "pt"}
	for k, v := range metadata {
		meta[k] = v
	}
	b = append(b, `{"`+metadataKey+`":{`...)
	for i, k := range slices.Sorted(maps.Keys(meta)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, meta[k])
	}
	b = append(b, '}')
	var offset int64
	size := int64(dtype.Size())
	for _, t := range tensors {
		b = append(b, ',')
		b = appendJSONString(b, t.Name)
		b = append(b, `:{"dtype":"`...)
		b = append(b, dtype.String()...)
		b = append(b, `","shape":[`...)
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		end := offset + t.elements()*size
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, offset, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, end, 10)
		b = append(b, "]}"...)
		offset = end
	}
	b = append(b, '}')
	for (len(b)-start)%8 != 0 {
		b = append(b, ' ')
	}
	return b
}

// appendJSONString appends s as a JSON string, escaping as little as
// serde_json, and so the safetensors library, does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// encodeChunk is the size of the buffer values are converted in on their
// way to a file.
const encodeChunk = 64 << 10

// writeData writes data converted to dtype, little-endian, to w, a
// chunk at a time through buf (at least one value long).
func writeData(w io.Writer, buf []byte, data []float32, dtype DType) error {
	size := dtype.Size()
	per := len(buf) / size
	for len(data) > 0 {
		n := min(len(data), per)
		encode(buf[:n*size], data[:n], dtype)
		if _, err := w.Write(buf[:n*size]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// WriteSet writes tensors as the weights of the checkpoint folder dir,
// creating it if need be, and returns the names of the files written, in
// the order written.
//
// If the weights fit in opt.MaxShardBytes (or it is not positive), WriteSet
// writes one file, "model.safetensors". Otherwise it writes shards
// "model-00001-of-0000N.safetensors" and then the index
// "model.safetensors.index.json", {"metadata": {"total_size": BYTES},
// "weight_map": {TENSOR: SHARD, ...}}, byte for byte as HuggingFace
// transformers does. Only once the new files are in place does it remove
// the files of an earlier save with a different layout: a stale index,
// model.safetensors, or shards of another count.
//
// Every file is written atomically (see [WriteFile]) and the tensors
// are checked before anything is written, but a crash while the shards of
// a sharded set are being replaced can leave a mix of old and new shards.
func WriteSet(dir string, tensors []Tensor, opt WriteOptions) ([]string, error) {
	if err := checkWrite(dir, tensors, opt.DType, opt.Metadata); err != nil {
		return nil, err
	}
	specs := make([]StreamTensor, len(tensors))
	for i, t := range tensors {
		specs[i] = StreamTensor{Name: t.Name, Shape: t.Shape}
	}
	return writeSet(dir, specs, opt, func(i int, put func([]float32) error) error { return put(tensors[i].Data) })
}

// WriteSetStream is WriteSet without holding the weights: the files are
// planned from the tensors' shapes, and fill gives each tensor's values
// when its file is written (see WriteStream), so that at most one tensor,
// or the part of one that fill hands over at a time, is in memory. The
// tensors are taken in the order given, as WriteSet takes them.
func WriteSetStream(dir string, tensors []StreamTensor, opt WriteOptions, fill Fill) ([]string, error) {
	if err := checkHeader(dir, tensors, opt.DType, opt.Metadata); err != nil {
		return nil, err
	}
	return writeSet(dir, tensors, opt, fill)
}

// writeSet is WriteSetStream after the checks.
func writeSet(dir string, tensors []StreamTensor, opt WriteOptions, fill Fill) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	plan := newSetPlan(tensors, opt.DType, opt.MaxShardBytes)
	var written []string
	for i, shard := range plan.shards {
		name := plan.fileName(i)
		specs := make([]StreamTensor, len(shard))
		for j, k := range shard {
			specs[j] = tensors[k]
		}
		sum, err := writeStream(filepath.Join(dir, name), specs, opt.DType, opt.Metadata, opt.Sums != nil,
			func(j int, put func([]float32) error) error { return fill(shard[j], put) })
		if err != nil {
			return written, err
		}
		if opt.Sums != nil {
			opt.Sums[name] = sum
		}
		written = append(written, name)
	}
	if len(plan.shards) > 1 {
		index := plan.index()
		if err := atomicfile.WriteFile(filepath.Join(dir, SafetensorsIndexFile), index); err != nil {
			return written, err
		}
		if opt.Sums != nil {
			opt.Sums[SafetensorsIndexFile] = SumBytes(index)
		}
		written = append(written, SafetensorsIndexFile)
	}
	if err := removeStale(dir, written); err != nil {
		return written, err
	}
	return written, nil
}

// setPlan is the files of an HF set of weights, planned from the
// tensors' shapes: which tensors each file holds, the files' names and
// the index.
type setPlan struct {
	tensors []StreamTensor
	dtype   DType
	shards  [][]int // indices into tensors, file by file
}

func newSetPlan(tensors []StreamTensor, dtype DType, maxBytes int64) setPlan {
	return setPlan{tensors: tensors, dtype: dtype, shards: planShards(tensors, dtype, maxBytes)}
}

// fileName is the name of file i: model.safetensors when it is the only
// one, else model-0000i-of-0000N.safetensors.
func (p setPlan) fileName(i int) string {
	if len(p.shards) == 1 {
		return SafetensorsFile
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(p.shards))
}

// index is model.safetensors.index.json of a set of several files.
func (p setPlan) index() []byte {
	weightMap := make(map[string]string, len(p.tensors))
	var total int64
	for i, shard := range p.shards {
		for _, k := range shard {
			weightMap[p.tensors[k].Name] = p.fileName(i)
			total += p.tensors[k].elements() * int64(p.dtype.Size())
		}
	}
	return appendIndex(nil, total, weightMap)
}

// planShards splits tensors into shards of at most maxBytes bytes, as
// huggingface_hub's split_torch_state_dict_into_shards does, as lists of
// indices into tensors. It returns a single shard if maxBytes is not
// positive or everything fits.
func planShards(tensors []StreamTensor, dtype DType, maxBytes int64) [][]int {
	all := make([]int, len(tensors))
	for i := range all {
		all[i] = i
	}
	if maxBytes <= 0 {
		return [][]int{all}
	}
	var (
		shards  [][]int
		current []int
		size    int64
	)
	for i := range tensors {
		n := tensors[i].elements() * int64(dtype.Size())
		if n > maxBytes {
			shards = append(shards, []int{i})
			continue
		}
		if size+n > maxBytes {
			shards = append(shards, current)
			current, size = nil, 0
		}
		current = append(current, i)
		size += n
	}
	if len(current) > 0 || len(shards) == 0 {
		shards = append(shards, current)
	}
	return shards
}

// appendIndex appends the JSON of a shard index as transformers writes it:
// json.dumps(index, indent=2, sort_keys=True) followed by a newline.
func appendIndex(b []byte, totalSize int64, weightMap map[string]string) []byte {
	b = append(b, "{\n  \"metadata\": {\n    \"total_size\": "...)
	b = strconv.AppendInt(b, totalSize, 10)
	b = append(b, "\n  },\n  \"weight_map\": {"...)
	for i, name := range slices.Sorted(maps.Keys(weightMap)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = appendPythonJSONString(b, name)
		b = append(b, ": "...)
		b = appendPythonJSONString(b, weightMap[name])
	}
	if len(weightMap) > 0 {
		b = append(b, "\n  "...)
	}
	return append(b, "}\n}\n"...)
}

// appendPythonJSONString appends s as Python's json.dumps writes a string
// by default (ensure_ascii): everything outside printable ASCII escaped.
func appendPythonJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r >= 0x20 && r < 0x7f:
			b = append(b, byte(r))
		case r > 0xffff:
			r -= 0x10000
			b = u(b, 0xd800+r>>10)
			b = u(b, 0xdc00+r&0x3ff)
		default:
			b = u(b, r)
		}
	}
	return append(b, '"')
}

// removeStale removes the weight files of an earlier save that are not
// among the files just written.
func removeStale(dir string, written []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	removed := false
	for _, e := range entries {
		name := e.Name()
		stale := name == SafetensorsFile || name == SafetensorsIndexFile || isShardName(name)
		if !stale || slices.Contains(written, name) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("checkpoints: removing stale weights: %w", err)
		}
		removed = true
	}
	if removed {
		return atomicfile.SyncDir(dir)
	}
	return nil
}

// isShardName reports whether name is a shard name as WriteSet writes them,
// "model-00001-of-00003.safetensors".
func isShardName(name string) bool {
	const pattern = "model-#####-of-#####.safetensors"
	if len(name) != len(pattern) {
		return false
	}
	for i := range len(pattern) {
		if pattern[i] == '#' && (name[i] < '0' || name[i] > '9') || pattern[i] != '#' && name[i] != pattern[i] {
			return false
		}
	}
	return true
}
