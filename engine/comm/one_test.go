package comm_test

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/commtest"
	"github.com/memtrain/memtrain/engine/cpu"
)

// TestOneConformance runs the suite on groups of one rank, the only size
// One makes.
func TestOneConformance(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	newOne := func(t *testing.T, n int, _ ...comm.Option) []comm.Comm {
		if n != 1 {
			return nil
		}
		return []comm.Comm{comm.One(b, "one")}
	}
	commtest.Run(t, newOne, commtest.Config{
		Backend:   func(int) engine.Backend { return b },
		RankOrder: true, // a sum of one rank is its own value, bit for bit
		Sizes:     []int{1},
	})
}

// TestOneSplit checks that the groups split from One are groups of one
// that share its counters and step, and that a closed one refuses work.
func TestOneSplit(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	world := comm.One(b, "world")
	gs, err := comm.SplitGrid(world, comm.Grid{Data: 1, X: 1, Y: 1, Z: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []comm.Comm{gs.X, gs.Y, gs.Z, gs.Data, gs.DataZ} {
		if c.Rank() != 0 || c.Size() != 1 {
			t.Errorf("group %q: rank %d of %d, want 0 of 1", c.Group(), c.Rank(), c.Size())
		}
	}
	if gs.DataZ.Group() != "data-z" {
		t.Errorf("DataZ is named %q", gs.DataZ.Group())
	}
	world.SetStep(7)
	if s := gs.Z.Stats().Step; s != 7 {
		t.Errorf("a split group's step is %d after the world's SetStep(7)", s)
	}
	if c, err := world.Split("none", comm.Undefined, 0); c != nil || err != nil {
		t.Errorf("Split(Undefined) = %v, %v; want nil, nil", c, err)
	}
	x := b.Alloc(engine.F32, 4)
	defer b.Free(x)
	if err := gs.X.AllReduce(x); err != nil {
		t.Fatal(err)
	}
	if _, step := world.Stats().Sum(); step.Calls != 0 {
		t.Errorf("a group of one counted %d calls", step.Calls)
	}
	if err := gs.Close(); err != nil {
		t.Fatal(err)
	}
	err = gs.X.AllReduce(x)
	if err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("AllReduce on a closed group: %v, want a closed-communicator error", err)
	}
}
