package engine

import (
	"fmt"
	"reflect"
)

// MisuseClass says what is wrong with the arguments of a refused call.
type MisuseClass int

const (
	// MisuseShape: sizes or shapes that do not fit together (a tensor too
	// small for a Gemm, lengths that differ, a host slice of the wrong
	// length, heads that do not divide).
	MisuseShape MisuseClass = iota + 1
	// MisuseDType: a dtype the kernel does not take.
	MisuseDType
	// MisuseAlias: arguments that overlap where the kernel forbids it.
	MisuseAlias
	// MisuseRange: an index, count or step outside its range: token ids,
	// targets, AttentionKV's start, AdamW's Step, negative sizes or
	// strides, a leading dimension below the columns stored.
	MisuseRange
	// MisuseTensor: a nil, freed or foreign tensor (another backend's, or
	// of a storage type the backend does not know), or a view that overruns
	// its storage.
	MisuseTensor
)

func (c MisuseClass) String() string {
	switch c {
	case MisuseShape:
		return "shape"
	case MisuseDType:
		return "dtype"
	case MisuseAlias:
		return "alias"
	case MisuseRange:
		return "range"
	case MisuseTensor:
		return "tensor"
	}
	return fmt.Sprintf("MisuseClass(%d)", int(c))
}

// Misuse is the value a Backend panics with when a call's arguments break
// its contract: a programming error of the caller (shapes come from the
// engine's own arithmetic), not an input error. A refused call checks its
// arguments before it computes anything, so the kernel does not run, and
// the backend works on afterwards.
//
// Backend is the backend's short name ("cpu", "cuda"), a prefix of its
// Name(); Op the method as engine.Backend names it ("Gemm", "Add",
// "Free", …).
type Misuse struct {
	Backend, Op string
	Class       MisuseClass
	Detail      string
}

// Error reads "cpu: Gemm: shape: <detail>".
func (m *Misuse) Error() string {
	return m.Backend + ": " + m.Op + ": " + m.Class.String() + ": " + m.Detail
}

// Misusef returns a Misuse whose Detail is formatted from format and args.
func Misusef(backend, op string, class MisuseClass, format string, args ...any) *Misuse {
	return &Misuse{Backend: backend, Op: op, Class: class, Detail: fmt.Sprintf(format, args...)}
}

// Overlap reports how two tensors' elements overlap: same when they view
// the same elements of one storage (the same offset and length, whatever
// their shapes), partial when they share some elements but are not the
// same view. Tensors of different storages, nil or empty ones never
// overlap. It is O(1): kernels call it to refuse aliasing they forbid.
func Overlap(a, b *Tensor) (same, partial bool) {
	if a == nil || b == nil || !sameStorage(a.Storage, b.Storage) {
		return false, false
	}
	na, nb := a.Len(), b.Len()
	if na == 0 || nb == 0 {
		return false, false
	}
	if a.Offset == b.Offset && na == nb {
		return true, false
	}
	return false, a.Offset < b.Offset+nb && b.Offset < a.Offset+na
}

// sameStorage reports whether a and b are one storage, without panicking
// on storages of an incomparable type (which are then never the same).
func sameStorage(a, b Storage) bool {
	if a == nil || b == nil {
		return false
	}
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) || !t.Comparable() {
		return false
	}
	return a == b
}
