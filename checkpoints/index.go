package checkpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// A Set is the weights of a checkpoint folder: one safetensors file, or the
// shards an index file lists. Its methods may be called concurrently, except
// Close.
type Set struct {
	dir     string
	files   []*File      // sorted by path
	tensors []TensorInfo // sorted by name
	owner   map[string]*File
	// pieces, for a sharded checkpoint's tensors (OpenPieces), replace
	// files and owner: each tensor is read from its pieces, in lazy's
	// files.
	pieces map[string]*pieceTensor
	lazy   []*lazyFile
}

// OpenSet opens the weights of the checkpoint folder dir. It reads
// model.safetensors.index.json and the shards it lists if there is one;
// otherwise model.safetensors; otherwise, in a sharded training
// checkpoint, the weights' pieces its manifest maps (ReadPieceMap);
// otherwise every *.safetensors file in dir.
//
// OpenSet checks that every tensor the index lists is in the file the index
// names, that the shards hold no tensor the index does not list, and that
// no tensor is in two files.
func OpenSet(dir string) (*Set, error) {
	indexPath := filepath.Join(dir, SafetensorsIndexFile)
	data, err := inputfile.ReadFile(indexPath)
	switch {
	case err == nil:
		return openIndexed(dir, indexPath, data)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("checkpoints: %w", err)
	}

	single := filepath.Join(dir, SafetensorsFile)
	if _, err := os.Stat(single); err == nil {
		return openFiles(dir, []string{single})
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}

	if m, files, err := ReadPieceMap(dir); err != nil {
		return nil, err
	} else if m != nil {
		return OpenPieces(dir, m, files, IsWeightName)
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") && !e.IsDir() {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("checkpoints: %s: no %s, %s or other .safetensors file", dir, SafetensorsIndexFile, SafetensorsFile)
	}
	return openFiles(dir, paths)
}

// openFiles opens the files at paths, sorted, as one set.
func openFiles(dir string, paths []string) (*Set, error) {
	s := &Set{dir: dir, owner: make(map[string]*File)}
	for _, p := range paths {
		f, err := OpenFile(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, t := range f.tensors {
			if other, ok := s.owner[t.Name]; ok {
				s.Close()
				return nil, fmt.Errorf("checkpoints: %s: tensor %q: also in %s", p, t.Name, other.path)
			}
			s.owner[t.Name] = f
			s.tensors = append(s.tensors, t)
		}
	}
	slices.SortFunc(s.tensors, func(a, b TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}

// openIndexed opens the shards listed by the index at indexPath, whose
// contents are data.
func openIndexed(dir, indexPath string, data []byte) (*Set, error) {
	weightMap, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %s: %w", indexPath, err)
	}
	var names []string
	for _, tensor := range slices.Sorted(maps.Keys(weightMap)) {
		if name := weightMap[tensor]; !slices.Contains(names, name) {
			names = append(names, name)
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("checkpoints: %s: tensor %q: file %s: %w", indexPath, tensor, name, err)
			}
		}
	}
	slices.Sort(names)
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = filepath.Join(dir, name)
	}
	s, err := openFiles(dir, paths)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		file := filepath.Join(dir, weightMap[name])
		f, ok := s.owner[name]
		switch {
		case !ok:
			err = fmt.Errorf("checkpoints: %s: tensor %q: listed for %s, which does not hold it", indexPath, name, file)
		case f.path != file:
			err = fmt.Errorf("checkpoints: %s: tensor %q: listed for %s but stored in %s", indexPath, name, file, f.path)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	for _, t := range s.tensors {
		if _, ok := weightMap[t.Name]; !ok {
			s.Close()
			return nil, fmt.Errorf("checkpoints: %s: tensor %q: not listed in %s", s.owner[t.Name].path, t.Name, indexPath)
		}
	}
	return s, nil
}

// parseIndex parses a model.safetensors.index.json and returns its
// weight_map, tensor name to shard file name. The shard names must be plain
// file names in the index's folder.
func parseIndex(data []byte) (map[string]string, error) {
	var weightMap map[string]string
	err := decodeJSONObject(data, "index", func(key string, value json.RawMessage) error {
		switch key {
		case "metadata":
			if !isNull(value) {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(value, &m); err != nil {
					return errors.New("index: metadata is not an object")
				}
			}
		case "weight_map":
			weightMap = make(map[string]string)
			return decodeJSONObject(value, "weight_map", func(name string, value json.RawMessage) error {
				var file string
				if err := json.Unmarshal(value, &file); err != nil {
					return fmt.Errorf("tensor %q: file %s is not a string", name, clip(value))
				}
				if file == "" || file == "." || file == ".." || strings.ContainsAny(file, `/\`) || filepath.Base(file) != file {
					return fmt.Errorf("tensor %q: file %q is not a plain file name", name, file)
				}
				weightMap[name] = file
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(weightMap) == 0 {
		return nil, errors.New("index: no weight_map, or an empty one")
	}
	return weightMap, nil
}

// Dir returns the folder the set was opened from.
func (s *Set) Dir() string { return s.dir }

// Files returns the paths of the set's files, sorted.
func (s *Set) Files() []string {
	if s.pieces != nil {
		paths := make([]string, len(s.lazy))
		for i, l := range s.lazy {
			paths[i] = l.path
		}
		return paths
	}
	paths := make([]string, len(s.files))
	for i, f := range s.files {
		paths[i] = f.path
	}
	return paths
}

// FileOf returns the path of the file holding the named tensor, or "" if
// the set has no such tensor.
func (s *Set) FileOf(name string) string {
	if pt, ok := s.pieces[name]; ok {
		if pt.grid != nil {
			return pt.files[pt.grid.file(0, 0, 0)].path
		}
		return pt.cells[0][0].file.path
	}
	if f, ok := s.owner[name]; ok {
		return f.path
	}
	return ""
}

// Tensors returns the tensors of all files of the set, sorted by name.
// Offsets are relative to the file holding each tensor; see FileOf (of a
// sharded checkpoint's tensor, stored in pieces, the offset is -1 and the
// size the pieces' sum).
func (s *Set) Tensors() []TensorInfo {
	ts := make([]TensorInfo, len(s.tensors))
	for i, t := range s.tensors {
		ts[i] = t.clone()
	}
	return ts
}

// A SetSummary is what a set holds on disk.
type SetSummary struct {
	Files   []string         `json:"files"` // the paths of the files holding tensors, sorted
	Tensors int              `json:"tensors"`
	Bytes   map[string]int64 `json:"bytes"` // by stored dtype
}

// Summary counts the set's tensors and their stored bytes by dtype, and
// lists the files that hold them.
func (s *Set) Summary() SetSummary {
	sum := SetSummary{Bytes: map[string]int64{}}
	files := map[string]bool{}
	for _, t := range s.tensors {
		sum.Tensors++
		sum.Bytes[t.DType.String()] += t.Size
		if s.pieces == nil {
			files[s.FileOf(t.Name)] = true
		}
	}
	sum.Files = slices.Sorted(maps.Keys(files))
	if s.pieces != nil {
		sum.Files = s.Files()
	}
	return sum
}

// Tensor returns the named tensor, and whether the set holds it.
func (s *Set) Tensor(name string) (TensorInfo, bool) {
	if s.pieces != nil {
		i, ok := slices.BinarySearchFunc(s.tensors, name, func(t TensorInfo, name string) int { return strings.Compare(t.Name, name) })
		if !ok {
			return TensorInfo{}, false
		}
		return s.tensors[i].clone(), true
	}
	f, ok := s.owner[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensor(name)
}

// tensor returns the named tensor as pieces to read (a tensor of one
// piece in a plain file).
func (s *Set) tensor(name string) (*pieceTensor, error) {
	if pt, ok := s.pieces[name]; ok {
		return pt, nil
	}
	if f, ok := s.owner[name]; ok {
		t, err := f.lookup(name)
		if err != nil {
			return nil, err
		}
		if len(t.Shape) > 2 {
			return nil, fmt.Errorf("checkpoints: %s: tensor %q: shape %v: reads take tensors of up to 2 dimensions", f.path, name, t.Shape)
		}
		return onePiece(f, t), nil
	}
	return nil, fmt.Errorf("checkpoints: %s: tensor %q: %w", s.dir, name, ErrTensorNotFound)
}

// ReadFloat32 reads the named tensor, converting it to float32.
func (s *Set) ReadFloat32(name string) ([]float32, error) {
	if f, ok := s.owner[name]; ok {
		return f.ReadFloat32(name)
	}
	pt, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, pt.rows*pt.cols)
	return dst, s.readBlock(pt, dst, 0, pt.rows, 0, pt.cols, 0, int64(len(dst)))
}

// ReadFloat32Into reads the named tensor into dst, converting it to
// float32. The length of dst must be the number of elements of the tensor.
func (s *Set) ReadFloat32Into(name string, dst []float32) error {
	if f, ok := s.owner[name]; ok {
		return f.ReadFloat32Into(name, dst)
	}
	pt, err := s.tensor(name)
	if err != nil {
		return err
	}
	if len(dst) != pt.rows*pt.cols {
		return fmt.Errorf("checkpoints: %s: tensor %q: destination holds %d values, the tensor of shape %v has %d", s.dir, name, len(dst), pt.shape, pt.rows*pt.cols)
	}
	return s.readBlock(pt, dst, 0, pt.rows, 0, pt.cols, 0, int64(len(dst)))
}

// ReadSlice reads rows r0:r1 and columns c0:c1 of the named 2-D tensor;
// see [File.ReadSlice].
func (s *Set) ReadSlice(name string, r0, r1, c0, c1 int) ([]float32, error) {
	if f, ok := s.owner[name]; ok {
		return f.ReadSlice(name, r0, r1, c0, c1)
	}
	pt, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(pt.shape) != 2 {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: slicing needs a 2-D tensor, the shape is %v", s.dir, name, pt.shape)
	}
	if r0 < 0 || r0 > r1 || r1 > pt.rows || c0 < 0 || c0 > c1 || c1 > pt.cols {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: slice [%d:%d, %d:%d] out of range for shape %v", s.dir, name, r0, r1, c0, c1, pt.shape)
	}
	dst := make([]float32, (r1-r0)*(c1-c0))
	return dst, s.readBlock(pt, dst, r0, r1, c0, c1, 0, int64(len(dst)))
}

// ReadBlock reads a part of a block of the named tensor, of 1 or 2
// dimensions (a vector is one row): of rows r0:r1 and columns c0:c1,
// taken row-major, the elements flat0 ≤ k < flat1, converted to float32.
// It reads exactly those elements' bytes, from whichever files and
// pieces hold them: the part of a weight a rank of a grid holds
// (engine/parallel's Shard), from a checkpoint saved on any grid.
func (s *Set) ReadBlock(name string, r0, r1, c0, c1, flat0, flat1 int) ([]float32, error) {
	pt, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	if flat0 < 0 || flat1 < flat0 {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q: elements %d…%d", s.dir, name, flat0, flat1)
	}
	dst := make([]float32, flat1-flat0)
	return dst, s.readBlock(pt, dst, r0, r1, c0, c1, int64(flat0), int64(flat1))
}

func (s *Set) readBlock(pt *pieceTensor, dst []float32, r0, r1, c0, c1 int, flat0, flat1 int64) error {
	if err := pt.readBlock(dst, r0, r1, c0, c1, flat0, flat1); err != nil {
		var l located
		if errors.As(err, &l) {
			return l.error
		}
		return fmt.Errorf("checkpoints: %s: tensor %q: %w", s.dir, pt.name, err)
	}
	return nil
}

// BytesRead returns the number of bytes of tensor data the set's files
// have converted so far.
func (s *Set) BytesRead() int64 {
	var n int64
	for _, l := range s.lazy {
		if f := l.opened(); f != nil {
			n += f.BytesRead()
		}
	}
	for _, f := range s.files {
		n += f.BytesRead()
	}
	return n
}

// Close closes the set's files.
func (s *Set) Close() error {
	var errs []error
	for _, l := range s.lazy {
		if f := l.opened(); f != nil {
			if err := f.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, f := range s.files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ManifestFile is a training checkpoint's manifest (finetune writes and
// verifies it); in a sharded checkpoint its "tensors" are the PieceMap of
// the weights and the optimizer's moments.
const ManifestFile = "checkpoint.json"

// ReadPieceMap returns the PieceMap of the sharded checkpoint in folder
// dir ("tensors") and its piece files ("piece_files", which PieceGrids
// index), unchecked (OpenPieces checks them), or nil when dir has no
// manifest or its manifest maps no tensors (a checkpoint of one file per
// kind).
func ReadPieceMap(dir string) (PieceMap, []string, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := inputfile.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoints: %w", err)
	}
	var m struct {
		PieceFiles []string `json:"piece_files"`
		Tensors    PieceMap `json:"tensors"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("checkpoints: %s: %v", path, err)
	}
	return m.Tensors, m.PieceFiles, nil
}

// IsWeightName reports whether a tensor name of a training checkpoint is
// a weight's (an HF name) rather than an optimizer moment's
// ("exp_avg/NAME", "exp_avg_sq/NAME"): HF names have no slash.
func IsWeightName(name string) bool { return !strings.Contains(name, "/") }
