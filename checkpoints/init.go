package checkpoints

import (
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
)

// initChunk is the number of elements drawn from one random stream. Each
// chunk has its own stream, seeded from (seed, tensor name, chunk index), so
// the weights are the same whatever the number of threads.
const initChunk = 1 << 20

// RandomWeights returns freshly initialised weights for cfg, as
// LlamaForCausalLM initialises them: every matrix normal with mean 0 and
// standard deviation cfg.InitializerRange (0.02 when unset), every RMSNorm
// weight one, every bias (Qwen2's) zero. The result depends only on cfg
// and seed.
func RandomWeights(cfg *Config, seed uint64) []Tensor {
	std := cfg.InitializerRange
	if std <= 0 {
		std = 0.02
	}
	specs := cfg.TensorSpecs()
	tensors := make([]Tensor, len(specs))
	type job struct {
		data  []float32
		key   uint64
		chunk uint64
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r := rand.New(rand.NewPCG(seed, j.key^(j.chunk*0x9E3779B97F4A7C15)))
				for i := range j.data {
					j.data[i] = float32(r.NormFloat64() * std)
				}
			}
		}()
	}
	for i, s := range specs {
		data := make([]float32, s.Elements())
		tensors[i] = Tensor{Name: s.Name, Shape: append([]int(nil), s.Shape...), Data: data}
		if s.Role.Norm() {
			for j := range data {
				data[j] = 1
			}
			continue
		}
		if !s.Role.Matrix() {
			continue // a bias: zero
		}
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		key := h.Sum64()
		for c := 0; c < len(data); c += initChunk {
			jobs <- job{data: data[c:min(c+initChunk, len(data))], key: key, chunk: uint64(c / initChunk)}
		}
	}
	close(jobs)
	wg.Wait()
	return tensors
}
