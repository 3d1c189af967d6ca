package local_test

import (
	"fmt"
	"sync"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cpu"
)

// Four in-process ranks all-reduce, then reduce-scatter 7 elements: rank
// r gets chunk r of the sums, 2, 2, 2 and 1 elements long.
func ExampleNew() {
	b := cpu.New(cpu.Options{Threads: 1})
	comms := local.New(4)
	out := make([]string, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() { // one goroutine per rank
			defer wg.Done()
			r := c.Rank()
			x := b.Alloc(engine.F32, 7)
			b.Upload(x, []float32{1, 2, 3, 4, 5, 6, float32(r)})
			if err := c.AllReduce(x); err != nil {
				panic(err)
			}
			_, n := comm.Chunk(7, c.Size(), r)
			mine := b.Alloc(engine.F32, n)
			if err := c.ReduceScatter(mine, x); err != nil {
				panic(err)
			}
			out[r] = fmt.Sprintf("rank %d: all-reduce %v, reduce-scatter %v", r, cpu.Float32s(x), cpu.Float32s(mine))
		}()
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	s := comms[0].Stats().Get("world", comm.AllReduce)
	fmt.Printf("rank 0 counted %d all-reduce of %d elements, sending %v\n", s.Total.Calls, s.Total.Elements, s.Total.Sent)
	// Output:
	// rank 0: all-reduce [4 8 12 16 20 24 6], reduce-scatter [16 32]
	// rank 1: all-reduce [4 8 12 16 20 24 6], reduce-scatter [48 64]
	// rank 2: all-reduce [4 8 12 16 20 24 6], reduce-scatter [80 96]
	// rank 3: all-reduce [4 8 12 16 20 24 6], reduce-scatter [24]
	// rank 0 counted 1 all-reduce of 7 elements, sending 10.5
}

func ExampleChunk() {
	for r := range 4 {
		off, n := comm.Chunk(7, 4, r)
		fmt.Printf("rank %d: [%d, %d)\n", r, off, off+n)
	}
	// Output:
	// rank 0: [0, 2)
	// rank 1: [2, 4)
	// rank 2: [4, 6)
	// rank 3: [6, 7)
}
