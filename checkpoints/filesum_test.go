package checkpoints

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// TestSaveRecordsSums: Save with Sums records every file it writes, and
// each sum, taken while writing, is the file's size and SHA-256 on disk.
func TestSaveRecordsSums(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dtype DType
		shard int64
		files []string
	}{
		{"one file", DTypeF32, 0, []string{ConfigFile, SafetensorsFile, tokenizer.FileName}},
		{"sharded bf16", DTypeBF16, 4096, []string{ConfigFile, "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
			"model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", SafetensorsIndexFile, tokenizer.FileName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig(false)
			dir := filepath.Join(t.TempDir(), "ck")
			sums := map[string]FileSum{}
			opt := SaveOptions{DType: tc.dtype, MaxShardBytes: tc.shard, Files: map[string][]byte{tokenizer.FileName: []byte(`{"model":{}}`)}, Sums: sums}
			if err := Save(dir, cfg, RandomWeights(cfg, 3), opt); err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(sums)), slices.Sorted(slices.Values(tc.files)); !slices.Equal(got, want) {
				t.Fatalf("sums of %v, want %v", got, want)
			}
			for name, sum := range sums {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if want := SumBytes(b); sum != want || len(sum.SHA256) != 64 {
					t.Errorf("%s: recorded %+v, on disk %+v", name, sum, want)
				}
			}
		})
	}
}

func TestWriteFileSum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	big := make([]float32, 3<<18) // 3 MiB: more than one buffer
	for i := range big {
		big[i] = float32(i)
	}
	sum, err := WriteFileSum(path, []Tensor{{Name: "a", Shape: []int{len(big)}, Data: big}}, DTypeF32, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := SumBytes(b); sum != want {
		t.Errorf("WriteFileSum = %+v, file %+v", sum, want)
	}
	if _, err := WriteFileSum(path, []Tensor{{Name: "a", Shape: []int{2}}}, DTypeF32, nil); err == nil {
		t.Error("a tensor without its values was written")
	}
}
