package comm

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// The checks below are shared by the implementations, so that every one
// rejects the same misuse with the same words. They describe the problem;
// the caller wraps it in an *Error naming the group and the collective.

// CheckTensor checks that t is a usable tensor.
func CheckTensor(name string, t *engine.Tensor) error {
	if t == nil || t.Storage == nil {
		return fmt.Errorf("%s is nil", name)
	}
	return nil
}

// CheckChunk checks the tensors of a reduce-scatter (full = src, part =
// dst) or all-gather (full = dst, part = src) on rank r of p: equal dtypes
// and devices, part as long as chunk r of full (Chunk), and no overlap
// unless part is exactly the chunk-r view of full, which it reports as
// inPlace. It returns the chunk's offset in full.
func CheckChunk(op Op, p, r int, full, part *engine.Tensor) (offset int, inPlace bool, err error) {
	fullName, partName := "src", "dst"
	if op == AllGather {
		fullName, partName = "dst", "src"
	}
	if err := CheckTensor(fullName, full); err != nil {
		return 0, false, err
	}
	if err := CheckTensor(partName, part); err != nil {
		return 0, false, err
	}
	if full.DType() != part.DType() || full.Device() != part.Device() {
		return 0, false, fmt.Errorf("%s is %v and %s is %v", fullName, full, partName, part)
	}
	n := full.Len()
	offset, length := Chunk(n, p, r)
	if part.Len() != length {
		return 0, false, fmt.Errorf("%s has %d elements, but chunk %d of %d elements over %d ranks has %d", partName, part.Len(), r, n, p, length)
	}
	if full.Storage == part.Storage {
		if part.Offset == full.Offset+offset {
			return offset, true, nil
		}
		if length > 0 && part.Offset < full.Offset+n && full.Offset < part.Offset+length {
			return 0, false, fmt.Errorf("%s overlaps %s without being its chunk %d", partName, fullName, r)
		}
	}
	return offset, false, nil
}

// CheckRoot checks a broadcast's root.
func CheckRoot(root, p int) error {
	if root < 0 || root >= p {
		return fmt.Errorf("root %d is not a rank of a group of %d", root, p)
	}
	return nil
}
