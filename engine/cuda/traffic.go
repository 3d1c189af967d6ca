package cuda

import "github.com/memtrain/memtrain/engine"

// traffic is what one call of a memory-bound operation costs this
// backend's device: the bytes its kernels read from and write to device
// memory, and the floating-point operations they do. Each operation
// declares it beside its launcher (addTraffic in elementwise.go,
// rmsnormTraffic in rmsnorm.go, …), from what its kernels do — scratch
// included (RMSNormBackward's float32 partial sums of dw, RoPE's angle
// table). engine.Kernel.Cost is the backend-independent model the
// planner (engine/perfmodel) uses; TestTrafficIsTheCostModel holds the two
// equal where the kernels move nothing beyond their operands; BenchmarkGPUBandwidth measures these
// declarations on a GPU.
//
// The bytes count every operand once, read or written (a tensor read and
// written in place twice), at its dtype's size: what the kernels must
// move at the least. Re-reads of a row that a block has just read (the
// second pass of RMSNorm, cross-entropy's passes over a row of logits)
// are taken to come from the caches and are not counted; for rows larger
// than the caches hold (a 128k vocabulary's 512 KiB of float32 logits)
// that undercounts, as crossEntropyTraffic says. The flops count the
// arithmetic of the formula, an operation each (exp, division and square
// root included), without the compensation of the float32 sums.
type traffic struct {
	bytes, flops float64
}

// plus adds the costs of two kernels of one operation.
func (t traffic) plus(u traffic) traffic { return traffic{t.bytes + u.bytes, t.flops + u.flops} }

// moved is the bytes of n elements of each of the dtypes: one operand
// apiece.
func moved(n int, dts ...engine.DType) float64 {
	var s float64
	for _, dt := range dts {
		s += float64(n) * float64(dt.Size())
	}
	return s
}
