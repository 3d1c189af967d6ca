package checkpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stListDir returns the names in dir, sorted.
func stListDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// stVec returns a 1-D tensor of n values.
func stVec(name string, n int) Tensor {
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i) + 0.5
	}
	return Tensor{Name: name, Shape: []int{n}, Data: data}
}

func TestPlanShards(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int // F32 elements per tensor
		max   int64
		want  [][]string
	}{
		{"no limit", []int{10, 20}, 0, [][]string{{"t0", "t1"}}},
		{"negative limit", []int{10, 20}, -1, [][]string{{"t0", "t1"}}},
		{"fits exactly", []int{10, 15}, 100, [][]string{{"t0", "t1"}}},
		{"no tensors", nil, 8, [][]string{nil}},
		{"split", []int{10, 10, 10}, 80, [][]string{{"t0", "t1"}, {"t2"}}},
		{"each alone", []int{10, 10, 10}, 40, [][]string{{"t0"}, {"t1"}, {"t2"}}},
		// A tensor over the limit gets its own shard, appended before the
		// shard being filled, as huggingface_hub does.
		{"oversized", []int{5, 30, 5, 5}, 40, [][]string{{"t1"}, {"t0", "t2"}, {"t3"}}},
		{"oversized first", []int{30, 5}, 40, [][]string{{"t0"}, {"t1"}}},
		{"empty tensors", []int{0, 10, 0, 0, 10}, 40, [][]string{{"t0", "t1", "t2", "t3"}, {"t4"}}},
	}
	for _, tt := range tests {
		var tensors []StreamTensor
		for i, n := range tt.sizes {
			tensors = append(tensors, StreamTensor{Name: fmt.Sprintf("t%d", i), Shape: []int{n}})
		}
		var got [][]string
		for _, shard := range planShards(tensors, DTypeF32, tt.max) {
			var names []string
			for _, i := range shard {
				names = append(names, tensors[i].Name)
			}
			got = append(got, names)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || len(got) != len(tt.want) {
			t.Errorf("%s: shards %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWriteSetSharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tensors := []Tensor{
		stRandom(rng, "z.embed", 10, 4), // 80 bytes in BF16
		stRandom(rng, "b", 8),           // 16
		stRandom(rng, "a", 8, 2),        // 32
		stRandom(rng, "big", 70),        // 140: a shard of its own
		stRandom(rng, "c", 3, 3),        // 18
		{Name: "empty", Shape: []int{0, 4}},
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	files, err := WriteSet(dir, tensors, WriteOptions{DType: DTypeBF16, MaxShardBytes: 100, Metadata: map[string]string{"step": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{
		"model-00001-of-00003.safetensors",
		"model-00002-of-00003.safetensors",
		"model-00003-of-00003.safetensors",
		"model.safetensors.index.json",
	}
	if !slices.Equal(files, wantFiles) {
		t.Fatalf("WriteSet wrote %q, want %q", files, wantFiles)
	}
	if got := stListDir(t, dir); !slices.Equal(got, wantFiles) {
		t.Fatalf("folder holds %q", got)
	}

	var index struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, err := os.ReadFile(filepath.Join(dir, SafetensorsIndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil {
		t.Fatal(err)
	}
	if got := index.Metadata["total_size"]; got != float64(80+16+32+140+18) {
		t.Errorf("total_size = %v", got)
	}
	// z.embed and b fill shard 1 (96 bytes); a would overflow it; big gets
	// a shard of its own, appended before the one being filled.
	wantMap := map[string]string{
		"z.embed": wantFiles[0], "b": wantFiles[0],
		"big": wantFiles[1],
		"a":   wantFiles[2], "c": wantFiles[2], "empty": wantFiles[2],
	}
	if !stMapsEqual(index.WeightMap, wantMap) {
		t.Errorf("weight_map = %v, want %v", index.WeightMap, wantMap)
	}
	wantIndex := "{\n  \"metadata\": {\n    \"total_size\": 286\n  },\n  \"weight_map\": {\n" +
		"    \"a\": \"model-00003-of-00003.safetensors\",\n" +
		"    \"b\": \"model-00001-of-00003.safetensors\",\n" +
		"    \"big\": \"model-00002-of-00003.safetensors\",\n" +
		"    \"c\": \"model-00003-of-00003.safetensors\",\n" +
		"    \"empty\": \"model-00003-of-00003.safetensors\",\n" +
		"    \"z.embed\": \"model-00001-of-00003.safetensors\"\n  }\n}\n"
	if string(b) != wantIndex {
		t.Errorf("index:\n%s\nwant:\n%s", b, wantIndex)
	}

	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Dir() != dir {
		t.Errorf("Dir() = %q", s.Dir())
	}
	if got := s.Files(); len(got) != 3 {
		t.Errorf("Files() = %q", got)
	}
	infos := s.Tensors()
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
	}
	if want := []string{"a", "b", "big", "c", "empty", "z.embed"}; !slices.Equal(names, want) {
		t.Errorf("Tensors() names %q, want %q", names, want)
	}
	var total int64
	for _, tt := range tensors {
		if got, want := s.FileOf(tt.Name), filepath.Join(dir, wantMap[tt.Name]); got != want {
			t.Errorf("FileOf(%q) = %q, want %q", tt.Name, got, want)
		}
		info, ok := s.Tensor(tt.Name)
		if !ok || info.DType != DTypeBF16 {
			t.Errorf("Tensor(%q) = %+v, %v", tt.Name, info, ok)
		}
		got, err := s.ReadFloat32(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(tt.Data))
		for i, v := range tt.Data {
			want[i] = roundTo(DTypeBF16, v)
		}
		stBits(t, tt.Name, got, want)
		into := make([]float32, len(want))
		if err := s.ReadFloat32Into(tt.Name, into); err != nil {
			t.Fatal(err)
		}
		total += 2 * int64(len(want)*2)
		f, err := OpenFile(s.FileOf(tt.Name))
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Metadata(); got["format"] != "pt" || got["step"] != "3" {
			t.Errorf("metadata of %s: %v", f.Path(), got)
		}
		f.Close()
	}
	sl, err := s.ReadSlice("z.embed", 2, 5, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(sl) != 6 || sl[0] != roundTo(DTypeBF16, tensors[0].Data[2*4+1]) {
		t.Errorf("ReadSlice = %v", sl)
	}
	total += 6 * 2
	if got := s.BytesRead(); got != total {
		t.Errorf("BytesRead() = %d, want %d", got, total)
	}
	if _, err := s.ReadFloat32("nope"); !errors.Is(err, ErrTensorNotFound) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("ReadFloat32(nope): %v", err)
	}
	if _, err := s.ReadSlice("nope", 0, 0, 0, 0); !errors.Is(err, ErrTensorNotFound) {
		t.Errorf("ReadSlice(nope): %v", err)
	}
	if err := s.ReadFloat32Into("nope", nil); !errors.Is(err, ErrTensorNotFound) {
		t.Errorf("ReadFloat32Into(nope): %v", err)
	}
	if _, ok := s.Tensor("nope"); ok || s.FileOf("nope") != "" {
		t.Errorf("Tensor(nope) found")
	}
}

func TestWriteSetLayoutChanges(t *testing.T) {
	tensors := []Tensor{stVec("a", 10), stVec("b", 10), stVec("c", 10), stVec("d", 10)} // 40 bytes each in F32
	dir := t.TempDir()
	unrelated := []string{"config.json", "tokenizer.json", "model-extra.safetensors", "model-1-of-2.safetensors", "notes.txt"}
	for _, name := range unrelated {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		max  int64
		want []string
	}{
		{40, []string{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", SafetensorsIndexFile}},
		{80, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", SafetensorsIndexFile}},
		{0, []string{SafetensorsFile}},
		{120, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", SafetensorsIndexFile}},
		{160, []string{SafetensorsFile}},
	}
	for i, step := range steps {
		// Change the values so a stale file would be noticed.
		for j := range tensors {
			tensors[j].Data[0] = float32(i)
		}
		files, err := WriteSet(dir, tensors, WriteOptions{MaxShardBytes: step.max})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(files, step.want) {
			t.Errorf("step %d: wrote %q, want %q", i, files, step.want)
		}
		want := slices.Sorted(slices.Values(append(slices.Clone(unrelated), step.want...)))
		if got := stListDir(t, dir); !slices.Equal(got, want) {
			t.Errorf("step %d: folder holds %q, want %q", i, got, want)
		}
		// Unrelated *.safetensors files do not matter when there is an
		// index or model.safetensors.
		s, err := OpenSet(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tensors {
			got, err := s.ReadFloat32(tt.Name)
			if err != nil {
				t.Fatal(err)
			}
			stBits(t, tt.Name, got, tt.Data)
		}
		s.Close()
	}
}

func TestWriteSetErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteSet(dir, []Tensor{stVec("a", 2)}, WriteOptions{MaxShardBytes: 4}); err != nil {
		t.Fatal(err)
	}
	before := stListDir(t, dir)
	// A bad tensor after some good ones: nothing is written.
	_, err := WriteSet(dir, []Tensor{stVec("x", 1), stVec("y", 1), {Name: "bad", Shape: []int{3}, Data: make([]float32, 2)}}, WriteOptions{MaxShardBytes: 4})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("WriteSet with a bad tensor: %v", err)
	}
	if after := stListDir(t, dir); !slices.Equal(before, after) {
		t.Errorf("folder changed from %q to %q", before, after)
	}
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Tensor("a"); !ok {
		t.Errorf("earlier set damaged")
	}
	s.Close()

	// The folder cannot be created.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := WriteSet(filepath.Join(file, "sub"), nil, WriteOptions{}); err == nil {
		t.Errorf("WriteSet under a file: no error")
	}
}

func TestOpenSetSources(t *testing.T) {
	a := []Tensor{stVec("a", 3)}
	b := []Tensor{stVec("b", 4)}
	c := []Tensor{stVec("c", 5)}
	write := func(dir, name string, ts []Tensor) {
		t.Helper()
		if err := WriteFile(filepath.Join(dir, name), ts, DTypeF32, nil); err != nil {
			t.Fatal(err)
		}
	}
	names := func(s *Set) []string {
		var n []string
		for _, info := range s.Tensors() {
			n = append(n, info.Name)
		}
		return n
	}

	// The index wins over model.safetensors and other files.
	dir := t.TempDir()
	write(dir, "x.safetensors", a)
	write(dir, SafetensorsFile, b)
	write(dir, "shard.safetensors", c)
	os.WriteFile(filepath.Join(dir, SafetensorsIndexFile), []byte(`{"weight_map":{"c":"shard.safetensors"}}`), 0o644)
	s, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"c"}) {
		t.Errorf("with an index: tensors %q", got)
	}
	s.Close()

	// Then model.safetensors.
	os.Remove(filepath.Join(dir, SafetensorsIndexFile))
	if s, err = OpenSet(dir); err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"b"}) {
		t.Errorf("with model.safetensors: tensors %q", got)
	}
	s.Close()

	// Then every *.safetensors.
	os.Remove(filepath.Join(dir, SafetensorsFile))
	os.Mkdir(filepath.Join(dir, "folder.safetensors"), 0o755)
	if s, err = OpenSet(dir); err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("without index or model.safetensors: tensors %q", got)
	}
	if got := s.Files(); len(got) != 2 {
		t.Errorf("Files() = %q", got)
	}
	s.Close()
}

func TestOpenSetErrors(t *testing.T) {
	shard := func(ts ...Tensor) []Tensor { return ts }
	tests := []struct {
		name  string
		files map[string][]Tensor
		index string // "" means none
		want  []string
	}{
		{name: "empty folder", want: []string{"no model.safetensors.index.json"}},
		{name: "tensor in two files", files: map[string][]Tensor{"x.safetensors": shard(stVec("a", 1), stVec("dup", 1)), "y.safetensors": shard(stVec("dup", 2))},
			want: []string{`tensor "dup"`, "x.safetensors", "y.safetensors"}},
		{name: "index names a missing file", files: map[string][]Tensor{"s1.safetensors": shard(stVec("a", 1))},
			index: `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, want: []string{SafetensorsIndexFile, `tensor "b"`, "s2.safetensors"}},
		{name: "index names the wrong file", files: map[string][]Tensor{"s1.safetensors": shard(stVec("a", 1)), "s2.safetensors": shard(stVec("b", 1))},
			index: `{"weight_map":{"a":"s2.safetensors","b":"s2.safetensors"}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "s2.safetensors"}},
		{name: "file lacks a listed tensor", files: map[string][]Tensor{"s1.safetensors": shard(stVec("a", 1))},
			index: `{"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}}`, want: []string{SafetensorsIndexFile, `tensor "b"`, "s1.safetensors"}},
		{name: "unlisted tensor", files: map[string][]Tensor{"s1.safetensors": shard(stVec("a", 1), stVec("extra", 1))},
			index: `{"weight_map":{"a":"s1.safetensors"}}`, want: []string{`tensor "extra"`, "s1.safetensors", "not listed"}},
		{name: "tensor in two shards", files: map[string][]Tensor{"s1.safetensors": shard(stVec("a", 1)), "s2.safetensors": shard(stVec("a", 1), stVec("b", 1))},
			index: `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, want: []string{`tensor "a"`, "s1.safetensors", "s2.safetensors"}},
		{name: "index not JSON", index: `{"weight_map":`, want: []string{SafetensorsIndexFile, "not valid JSON"}},
		{name: "index not an object", index: `[]`, want: []string{SafetensorsIndexFile, "not a JSON object"}},
		{name: "no weight_map", index: `{"metadata":{}}`, want: []string{SafetensorsIndexFile, "weight_map"}},
		{name: "empty weight_map", index: `{"weight_map":{}}`, want: []string{SafetensorsIndexFile, "weight_map"}},
		{name: "weight_map not an object", index: `{"weight_map":["a"]}`, want: []string{SafetensorsIndexFile, "weight_map"}},
		{name: "file not a string", index: `{"weight_map":{"a":1}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "not a string"}},
		{name: "duplicate tensor", index: `{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`, want: []string{SafetensorsIndexFile, "duplicate", `"a"`}},
		{name: "metadata not an object", index: `{"metadata":5,"weight_map":{"a":"x.safetensors"}}`, want: []string{SafetensorsIndexFile, "metadata"}},
		{name: "path traversal", index: `{"weight_map":{"a":"../x.safetensors"}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "plain file name"}},
		{name: "absolute path", index: `{"weight_map":{"a":"/etc/passwd"}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "plain file name"}},
		{name: "dot dot", index: `{"weight_map":{"a":".."}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "plain file name"}},
		{name: "backslash", index: `{"weight_map":{"a":"..\\x"}}`, want: []string{SafetensorsIndexFile, `tensor "a"`, "plain file name"}},
		{name: "bad shard", files: map[string][]Tensor{"s1.safetensors": nil}, index: `{"weight_map":{"a":"broken.safetensors"}}`, want: []string{"broken.safetensors", "too short"}},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		for name, ts := range tt.files {
			if err := WriteFile(filepath.Join(dir, name), ts, DTypeF32, nil); err != nil {
				t.Fatal(err)
			}
		}
		if tt.name == "bad shard" {
			os.WriteFile(filepath.Join(dir, "broken.safetensors"), []byte("abc"), 0o644)
		}
		if tt.index != "" {
			os.WriteFile(filepath.Join(dir, SafetensorsIndexFile), []byte(tt.index), 0o644)
		}
		s, err := OpenSet(dir)
		if err == nil {
			s.Close()
			t.Errorf("%s: no error", tt.name)
			continue
		}
		t.Logf("%s: %v", tt.name, err)
		for _, w := range append(tt.want, dir) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
	}
	if _, err := OpenSet(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("missing folder: no error")
	}
}

func TestAppendIndexMatchesPython(t *testing.T) {
	// What json.dumps({"metadata": {"total_size": 6}, "weight_map": m},
	// indent=2, sort_keys=True) + "\n" gives in Python 3.
	m := map[string]string{
		"plain":           "model-00001-of-00002.safetensors",
		"quote\"back\\":   "model-00002-of-00002.safetensors",
		"ctl\n\t\x01\x7f": "f",
		"é€😀/<&>":         "g",
	}
	want := `{
  "metadata": {
    "total_size": 6
  },
  "weight_map": {
    "ctl\n\t\u0001\u007f": "f",
    "plain": "model-00001-of-00002.safetensors",
    "quote\"back\\": "model-00002-of-00002.safetensors",
    "\u00e9\u20ac\ud83d\ude00/<&>": "g"
  }
}
`
	if got := string(appendIndex(nil, 6, m)); got != want {
		t.Errorf("appendIndex:\n%s\nwant:\n%s", got, want)
	}
	weightMap, err := parseIndex(appendIndex(nil, 6, m))
	if err != nil || !stMapsEqual(weightMap, m) {
		t.Errorf("parseIndex(appendIndex(m)) = %v, %v", weightMap, err)
	}
}

func TestSetSummary(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	tensors := []Tensor{stRandom(rng, "a", 10, 4), stRandom(rng, "b", 8), stRandom(rng, "c", 70)}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if _, err := WriteSet(dir, tensors, WriteOptions{DType: DTypeBF16, MaxShardBytes: 100}); err != nil {
		t.Fatal(err)
	}
	set, err := OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	s := set.Summary()
	if s.Tensors != 3 || len(s.Bytes) != 1 || s.Bytes["BF16"] != 2*(40+8+70) {
		t.Errorf("summary %+v", s)
	}
	if want := set.Files(); !slices.Equal(s.Files, want) || len(want) != 2 {
		t.Errorf("files %q, want the set's %q (two shards)", s.Files, want)
	}
}
