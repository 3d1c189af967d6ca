package engine

import (
	"fmt"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
)

// DType is the element type of a tensor.
type DType uint8

const (
	F32  DType = iota // IEEE float32
	BF16              // bfloat16, the GPU backend's compute type
	I32               // int32, token ids and positions
	I8                // 8-bit codes: AdamW's 8-bit moments (Int8Moments)
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case I8:
		return "i8"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case BF16:
		return 2
	case I8:
		return 1
	}
	return 4
}

// DeviceKind says what kind of processor a tensor lives on.
type DeviceKind uint8

const (
	CPU DeviceKind = iota
	CUDA
)

// Device names one processor: the CPU, or a GPU by index.
type Device struct {
	Kind  DeviceKind
	Index int
}

func (d Device) String() string {
	if d.Kind == CUDA {
		return fmt.Sprintf("cuda:%d", d.Index)
	}
	return "cpu"
}

// Storage is a backend's buffer: host memory for the CPU backend, device
// memory for a GPU. Tensors are views into a Storage.
type Storage interface {
	Device() Device
	DType() DType
	Len() int // elements
}

// A Tensor is a dense, row-major view of part of a Storage: Shape elements
// starting Offset elements into it. Tensors are cheap to make and copy;
// the data belongs to the Storage, which its Backend allocates and frees.
type Tensor struct {
	Storage Storage
	Offset  int
	Shape   []int
}

// DType is the element type of the underlying storage.
func (t *Tensor) DType() DType { return t.Storage.DType() }

// Device is where the tensor lives.
func (t *Tensor) Device() Device { return t.Storage.Device() }

// Len is the number of elements, the product of the shape.
func (t *Tensor) Len() int { return Elements(t.Shape) }

// Bytes is the tensor's size in memory.
func (t *Tensor) Bytes() int64 { return int64(t.Len()) * int64(t.DType().Size()) }

// Dim returns dimension i, counting from the end when i is negative.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	return t.Shape[i]
}

// View returns the tensor of the given shape that starts offset elements
// into t. It panics if the view does not fit inside t: views are made by
// the engine from shapes it computed, so a misfit is a programming error.
func (t *Tensor) View(offset int, shape ...int) *Tensor {
	n := Elements(shape)
	if offset < 0 || offset+n > t.Len() {
		panic(fmt.Sprintf("engine: view of %v at %d does not fit in a tensor of shape %v", shape, offset, t.Shape))
	}
	return &Tensor{Storage: t.Storage, Offset: t.Offset + offset, Shape: append([]int(nil), shape...)}
}

// Reshape returns t with another shape of the same number of elements.
func (t *Tensor) Reshape(shape ...int) *Tensor { return t.View(0, shape...) }

// Row returns the i-th slice along the first dimension.
func (t *Tensor) Row(i int) *Tensor {
	inner := Elements(t.Shape[1:])
	return t.View(i*inner, t.Shape[1:]...)
}

func (t *Tensor) String() string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = fmt.Sprint(d)
	}
	return fmt.Sprintf("%s[%s]@%s", t.DType(), strings.Join(dims, "×"), t.Device())
}

// Elements is the product of a shape.
func Elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// SameShape reports whether two tensors have equal shapes.
func SameShape(a, b *Tensor) bool {
	if len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

// A Shard says which part of a logical (full-shape) 2-D parameter a rank
// holds, after AxoNN: the (x, y) block rows [Row0, Row1) × columns
// [Col0, Col1), and of that block, flattened row-major, the elements
// [Flat0, Flat1) that this rank's Z coordinate stores. A 1-D parameter is a
// single row. The zero Shard with Full set means "everything".
type Shard struct {
	Row0, Row1, Col0, Col1 int
	Flat0, Flat1           int
}

// RowsCols is a parameter's shape of rank 1 or 2 as rows × columns: a
// vector is one row, as a Shard sees it.
func RowsCols(full []int) (rows, cols int) {
	if len(full) == 1 {
		return 1, full[0]
	}
	return full[0], full[1]
}

// WholeShard is the shard that holds all of a rows × cols parameter.
func WholeShard(rows, cols int) Shard {
	return Shard{Row0: 0, Row1: rows, Col0: 0, Col1: cols, Flat0: 0, Flat1: rows * cols}
}

// Elements is the number of elements the shard stores.
func (s Shard) Elements() int { return s.Flat1 - s.Flat0 }

// A Param is a trainable weight: its HuggingFace name, its logical
// full shape, how the grid splits it (as its family declares it), the
// shard this rank holds, and the local tensors for the value and its
// gradient (each Shard.Elements() long).
type Param struct {
	Name  string
	Full  []int // logical shape, as in the checkpoint
	Split checkpoints.Split
	Shard Shard
	Value *Tensor
	Grad  *Tensor
	// Copy, when not nil, is a BF16 copy of Value that the passes
	// multiply by (mixed precision): Value stays the float32 master
	// weight the optimizer updates, and the update refreshes Copy
	// (AdamWTensors.Copy), so that the two never disagree by more than
	// Copy's rounding.
	Copy *Tensor
	// Low, when not nil, holds the float32 master's low halves and Value
	// is nil: the master is split (SplitF32) into Copy, its high halves
	// rounded to nearest, and Low, a 16-bit residual in a BF16 tensor's
	// storage (its bits are no bfloat16 value), so that a mixed-precision
	// parameter takes 4 bytes for master and copy instead of 6.
	Low   *Tensor
	Decay bool // subject to weight decay (false for norms)
}
