package cuda

import (
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/enginetest"
)

// TestConformanceEmulated runs the conformance suite on the fake CUDA
// libraries: the kernels' own sources, emulated on the CPU, behind the
// backend's real bindings.
func TestConformanceEmulated(t *testing.T) {
	fakeCUDA(t)
	enginetest.Run(t, func() engine.Backend { return newFake(t, 0, GemmF32) })
}
