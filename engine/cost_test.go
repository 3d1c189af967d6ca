package engine

import (
	"reflect"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestCostRules checks each rule on a call whose cost is worked out by
// hand from the rule's documentation.
func TestCostRules(t *testing.T) {
	f32, bf16, i32 := func(s ...int) Operand { return Shaped(F32, s...) }, func(s ...int) Operand { return Shaped(BF16, s...) },
		func(s ...int) Operand { return Shaped(I32, s...) }
	cases := []struct {
		name         string
		k            Kernel
		class        Class
		flops, bytes float64
	}{
		// 2·8·16·32 FLOPs; A 8·32·2, B 32·16·2, C 8·16·4 written.
		{"gemm bf16→f32", Kernel{Op: "Gemm", Operands: []Operand{bf16(8, 32), bf16(16, 32), f32(8, 16)},
			Gemm: GemmParams{TransB: true, M: 8, N: 16, K: 32}}, ClassGEMM, 2 * 8 * 16 * 32, 8*32*2 + 32*16*2 + 8*16*4},
		// Beta = 1 reads C too; a batch of 3.
		{"gemm accumulate batched", Kernel{Op: "Gemm", Operands: []Operand{f32(3, 4), f32(3, 4), f32(3)},
			Gemm: GemmParams{M: 1, N: 1, K: 4, Beta: 1, Batch: 3}}, ClassGEMM, 2 * 3 * 4, 3 * (4*4 + 4*4 + 4 + 4)},
		// B 2, T 4, heads 8, kv 2, D 16: pairs 2·8·4·5/2 = 160, 4·16 each.
		{"attention", Kernel{Op: "Attention", Operands: []Operand{bf16(2, 4, 8, 16), f32(2, 8, 4), bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16)}},
			ClassAttention, 160 * 4 * 16, 2*(2*4*8*16*2) + 2*8*4*4 + 2*(2*4*2*16*2)},
		{"attention backward", Kernel{Op: "AttentionBackward", Operands: []Operand{
			bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16), bf16(2, 4, 8, 16),
			bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16), bf16(2, 4, 8, 16), f32(2, 8, 4)}},
			ClassAttention, 160 * 10 * 16, 4*(2*4*8*16*2) + 4*(2*4*2*16*2) + 2*8*4*4},
		// Decoding reads the whole caches [2, 8, 2, 16], or the window's 3
		// positions of the 8.
		{"attention kv", Kernel{Op: "AttentionKV", Operands: []Operand{f32(2, 1, 4, 16), f32(2, 1, 4, 16), bf16(2, 8, 2, 16), bf16(2, 8, 2, 16), i32(2)}},
			ClassMemory, 0, 2*(2*4*16*4) + 2*(2*8*2*16*2) + 2*4},
		{"attention kv window", Kernel{Op: "AttentionKV", Operands: []Operand{f32(2, 1, 4, 16), f32(2, 1, 4, 16), bf16(2, 8, 2, 16), bf16(2, 8, 2, 16), i32(2)}, Window: 3},
			ClassMemory, 0, 2*(2*4*16*4) + 2*(2*3*2*16*2) + 2*4},
		// A window of 2: queries see 1, 2, 2, 2 keys, 7 a head: 2·8·7 = 112
		// pairs. A window of T or more is plain causal.
		{"attention window", Kernel{Op: "Attention", Operands: []Operand{bf16(2, 4, 8, 16), f32(2, 8, 4), bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16)}, Window: 2},
			ClassAttention, 112 * 4 * 16, 2*(2*4*8*16*2) + 2*8*4*4 + 2*(2*4*2*16*2)},
		{"attention window past T", Kernel{Op: "Attention", Operands: []Operand{bf16(2, 4, 8, 16), f32(2, 8, 4), bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16)}, Window: 9},
			ClassAttention, 160 * 4 * 16, 2*(2*4*8*16*2) + 2*8*4*4 + 2*(2*4*2*16*2)},
		{"attention backward window", Kernel{Op: "AttentionBackward", Operands: []Operand{
			bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16), bf16(2, 4, 8, 16),
			bf16(2, 4, 8, 16), bf16(2, 4, 2, 16), bf16(2, 4, 2, 16), bf16(2, 4, 8, 16), f32(2, 8, 4)}, Window: 1},
			ClassAttention, 2 * 8 * 4 * 10 * 16, 4*(2*4*8*16*2) + 4*(2*4*2*16*2) + 2*8*4*4},
		// Logits read three times, the bf16 gradient written once.
		{"cross-entropy", Kernel{Op: "CrossEntropy", Operands: []Operand{f32(5), bf16(5, 100), f32(5, 100), i32(5), f32(5)}},
			ClassMemory, 0, 5*4 + 5*100*2 + 3*5*100*4 + 5*4 + 5*4},
		{"cross-entropy without gradient", Kernel{Op: "CrossEntropy", Operands: []Operand{f32(5), {}, f32(5, 100), i32(5), f32(5)}},
			ClassMemory, 0, 5*4 + 3*5*100*4 + 5*4 + 5*4},
		// One matrix with a bf16 copy (16 read, 12 + 2 written a value),
		// one norm without; then ctl.
		{"adamw step", Kernel{Op: "AdamWStep", Operands: []Operand{f32(10), f32(10), f32(10), f32(10), bf16(10), f32(3), f32(3), f32(3), f32(3), {}, f32(2)}},
			ClassMemory, 0, 10*30 + 3*28 + 8},
		// A split master (Copy and Low, 2 bytes each, read and written)
		// with bf16 moments: 4 + 8 + 8 bytes a value.
		{"adamw step, split master", Kernel{Op: "AdamWStep", Operands: []Operand{{}, f32(3, 100), bf16(3, 100), bf16(3, 100), bf16(3, 100), f32(2)}},
			ClassMemory, 0, 300*20 + 8},
		// 8-bit moments: 18 bytes a value (the master 8, the gradient 4,
		// the codes 4, the copy 2) and the float32 scales of m and v,
		// read and written, of 3 rows of 2 blocks (100 columns).
		{"adamw step, 8-bit moments", Kernel{Op: "AdamWStep", Operands: []Operand{f32(3, 100), f32(3, 100), Shaped(I8, 3, 100), Shaped(I8, 3, 100), bf16(3, 100), f32(2)}},
			ClassMemory, 0, 300*(8+4+4+2) + 3*2*16 + 8},
		// 6 rows of a bf16 table looked up into f32 rows.
		{"embedding", Kernel{Op: "Embedding", Operands: []Operand{f32(6, 4), bf16(50, 4), i32(6)}}, ClassMemory, 0, 6*4*2 + 6*4*4 + 6*4},
		{"embedding backward", Kernel{Op: "EmbeddingBackward", Operands: []Operand{f32(50, 4), bf16(6, 4), i32(6)}}, ClassMemory, 0, 2*6*4*4 + 6*4*2 + 6*4},
		{"rope in place", Kernel{Op: "RoPE", Operands: []Operand{bf16(6, 2, 8), i32(6), f32(4)}}, ClassMemory, 0, 2*6*2*8*2 + 6*4 + 4*4},
		{"rmsnorm backward", Kernel{Op: "RMSNormBackward", Operands: []Operand{f32(6, 4), f32(4), f32(6, 4), f32(6, 4), f32(4), f32(6)}},
			ClassMemory, 0, 3*6*4*4 + 2*4*4 + 4*4 + 6*4},
		// out, rstd, x (read and written: the stream), residual, w.
		{"add rmsnorm", Kernel{Op: "AddRMSNorm", Operands: []Operand{bf16(6, 4), f32(6), bf16(6, 4), bf16(6, 4), f32(4)}},
			ClassMemory, 0, 4*6*4*2 + 6*4 + 4*4},
		// A bf16 y [6, 4] read and written, its f32 bias read once.
		{"add bias", Kernel{Op: "AddBias", Operands: []Operand{bf16(6, 4), f32(4)}}, ClassMemory, 0, 2*6*4*2 + 4*4},
		// db read and written, a bf16 dy read.
		{"bias grad", Kernel{Op: "BiasGrad", Operands: []Operand{f32(4), bf16(6, 4)}}, ClassMemory, 0, 2*4*4 + 6*4*2},
		{"upload", Kernel{Op: "UploadInt32", Operands: []Operand{i32(7)}}, ClassHost, 0, 28},
	}
	for _, c := range cases {
		got := c.k.Cost()
		if got.Class != c.class {
			t.Errorf("%s: class %v, want %v", c.name, got.Class, c.class)
		}
		// Exact: every count is a small integer.
		if err := numtest.Equal([]float64{got.FLOPs, got.Bytes}, []float64{c.flops, c.bytes}); err != nil {
			t.Errorf("%s: (FLOPs, bytes): %v", c.name, err)
		}
	}
}

// TestEveryMethodHasACostRule calls Cost on a call of every Backend
// method that touches a tensor: one added without a rule panics here.
func TestEveryMethodHasACostRule(t *testing.T) {
	// Allocation and the device's description cost no kernel (Empty is an
	// allocation without its zero-fill).
	none := map[string]bool{"Name": true, "Device": true, "Threads": true, "MemStats": true, "Synchronize": true, "Alloc": true, "Free": true, "Empty": true}
	bt := reflect.TypeOf((*Backend)(nil)).Elem()
	tensor := reflect.TypeOf((*Tensor)(nil))
	op := Shaped(F32, 2, 3, 4, 8) // four dimensions, as attention's operands
	for i := 0; i < bt.NumMethod(); i++ {
		m := bt.Method(i)
		if none[m.Name] {
			continue
		}
		k := Kernel{Op: m.Name}
		for j := 0; j < m.Type.NumIn(); j++ {
			switch in := m.Type.In(j); {
			case in == tensor, in == reflect.TypeOf([]*Tensor(nil)):
				k.Operands = append(k.Operands, op)
			case in == reflect.TypeOf([]AdamWTensors(nil)):
				k.Operands = append(k.Operands, op, op, op, op, op)
			case in == reflect.TypeOf(GemmParams{}):
				k.Gemm = GemmParams{M: 2, N: 2, K: 2}
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %v", m.Name, r)
				}
			}()
			if c := k.Cost(); !(c.Bytes > 0) {
				t.Errorf("%s: %v bytes", m.Name, c.Bytes)
			}
		}()
	}
}
