package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// dim3 is a grid or block shape.
type dim3 struct{ x, y, z uint32 }

// grid1 and block1 are one-dimensional shapes.
func grid1(x int) dim3  { return dim3{uint32(x), 1, 1} }
func block1(x int) dim3 { return dim3{uint32(x), 1, 1} }

// kernelArgs holds a launch's arguments the way cuLaunchKernel takes them:
// an array of pointers, one per kernel parameter, each pointing at the
// parameter's value. Each value sits in its own 8-byte slot, little-endian,
// so a 4-byte int or float occupies the slot's first four bytes; the
// driver copies as many bytes from each pointer as the kernel's parameter
// has. Both arrays are Go memory that the garbage collector does not move,
// kept alive by the launch until cuLaunchKernel returns.
type kernelArgs struct {
	slots []uint64
	ptrs  []unsafe.Pointer
}

// packArgs checks args against sig, the kernel's parameter kinds, and
// packs them. Arguments must have exactly the Go type of their parameter
// (devptr, int32, int64, float32): a plain int is refused, since whether
// it is meant as a C int or a 64-bit index is exactly the mistake this
// check is for.
func packArgs(name kernel, sig []argKind, args []any) (*kernelArgs, error) {
	if len(args) != len(sig) {
		return nil, fmt.Errorf("cuda: kernel %s takes %d arguments, launched with %d", name, len(sig), len(args))
	}
	a := &kernelArgs{slots: make([]uint64, len(args)), ptrs: make([]unsafe.Pointer, len(args))}
	for i, v := range args {
		var got argKind
		switch x := v.(type) {
		case devptr:
			got, a.slots[i] = argPtr, uint64(x)
		case int32:
			got, a.slots[i] = argInt32, uint64(uint32(x))
		case int64:
			got, a.slots[i] = argInt64, uint64(x)
		case float32:
			got, a.slots[i] = argFloat32, uint64(math.Float32bits(x))
		default:
			return nil, fmt.Errorf("cuda: kernel %s argument %d is a %T; pass devptr, int32, int64 or float32", name, i, v)
		}
		if got != sig[i] {
			return nil, fmt.Errorf("cuda: kernel %s argument %d is %v, the kernel takes %v", name, i, got, sig[i])
		}
		a.ptrs[i] = unsafe.Pointer(&a.slots[i])
	}
	return a, nil
}

// params is the pointer array to hand to cuLaunchKernel.
func (a *kernelArgs) params() unsafe.Pointer {
	if len(a.ptrs) == 0 {
		return nil
	}
	return unsafe.Pointer(&a.ptrs[0])
}

// Launch shapes.
const (
	elementThreads = 256     // threads per block of elementwise kernels
	maxGridX       = 1 << 20 // blocks of a grid-stride loop: beyond this, each thread takes more elements
	maxGridYZ      = 65535   // the hardware limit of gridDim.y and .z
)

// elementGrid is the grid of a grid-stride loop over n elements.
func elementGrid(n int) dim3 {
	return grid1(max(1, min((n+elementThreads-1)/elementThreads, maxGridX)))
}

// rowThreads is the block size of a kernel that gives one block to a row
// of n elements: n rounded up to a warp, between 32 and limit (a multiple
// of 32 of at most 1024).
func rowThreads(n, limit int) dim3 {
	t := (n + 31) / 32 * 32
	return block1(max(32, min(t, limit)))
}
