package llama

import (
	"os"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// TestMain runs the package's tests with poisoning on (engine.Poison):
// every backend they create fills the tensors Empty returns with NaN, so
// a workspace tensor that a pass reads before writing (one that
// tensorPlan.writtenFirst wrongly lists) fails the tests that compare
// results, bit for bit or against PyTorch.
func TestMain(m *testing.M) {
	os.Setenv(engine.PoisonEnv, "1")
	os.Exit(m.Run())
}
