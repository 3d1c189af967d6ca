package goldfish_test

import (
	"fmt"

	"github.com/memtrain/memtrain/goldfish"
)

func Example() {
	// The published configuration: drop about one target in four, decided
	// by the 13 targets ending at each.
	m, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashTable, K: 4, H: 13})
	if err != nil {
		panic(err)
	}
	// "<|begin_of_text|>The quick brown fox jumps over the lazy dog. The
	// quick brown fox jumps over the lazy dog." in Llama 3's ids.
	ids := []int32{128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 578, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13}
	targets := ids[1:] // a causal LM predicts ids[i+1] from ids[:i+1]
	w := make([]float32, len(targets))
	dropped := m.Mask(targets, w)
	fmt.Println(w)
	fmt.Println(dropped, "of", len(targets), "targets dropped")
	// Output:
	// [1 1 1 1 1 1 1 1 1 1 1 1 0 1 0 1 0 1 1 1]
	// 3 of 20 targets dropped
}

func ExampleMasker_Apply() {
	m, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashAvalanche, K: 2, H: 2})
	if err != nil {
		panic(err)
	}
	targets := []int32{791, 4062, 14198, 39935, 35308, 927, 0, 0}
	w := []float32{1, 1, 1, 1, 1, 1, 0, 0} // the last two are padding
	n := m.Apply(targets, w)
	fmt.Println(w, n) // the padding's drops are not counted
	// Output:
	// [1 1 0 1 1 0 0 0] 2
}

func ExampleMasker_Mask_static() {
	m, err := goldfish.New(goldfish.Config{Strategy: goldfish.Static, K: 4, Start: 1})
	if err != nil {
		panic(err)
	}
	w := make([]float32, 10)
	n := m.Mask(make([]int32, 10), w)
	fmt.Println(w, n)
	// Output:
	// [1 0 1 1 1 0 1 1 1 0] 3
}

func ExampleNew_invalid() {
	_, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashTable, K: 1, H: 13})
	fmt.Println(err)
	// Output:
	// goldfish: k must be ≥ 2, got 1
}
