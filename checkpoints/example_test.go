package checkpoints_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/memtrain/memtrain/checkpoints"
)

// Create a small random checkpoint, then open it and read one rank's slice
// of a projection without reading the rest of the tensor.
func Example() {
	dir, err := os.MkdirTemp("", "ckpt")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	dir = filepath.Join(dir, "tiny")

	p, _ := checkpoints.LookupPreset("tiny")
	cfg := p.Config()
	cfg.VocabSize = 1000
	weights := checkpoints.RandomWeights(cfg, 42)
	if err := checkpoints.Save(dir, cfg, weights, checkpoints.SaveOptions{DType: checkpoints.DTypeBF16}); err != nil {
		log.Fatal(err)
	}

	ck, err := checkpoints.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	fmt.Println("parameters:", ck.Config.Params().Total)
	name := checkpoints.LayerTensorName(0, "self_attn.q_proj")
	info, _ := ck.Weights.Tensor(name)
	fmt.Println(name, info.DType, info.Shape)
	// Rows 32:64, columns 0:64 of the query projection: a quarter of it.
	part, err := ck.Weights.ReadSlice(name, 32, 64, 0, 64)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("slice elements:", len(part), "bytes read:", ck.Weights.BytesRead())
	// Output:
	// parameters: 915584
	// model.layers.0.self_attn.q_proj.weight BF16 [128 128]
	// slice elements: 2048 bytes read: 4096
}
