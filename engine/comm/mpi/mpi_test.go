//go:build mpi

package mpi_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/commtest"
	"github.com/memtrain/memtrain/engine/comm/mpi"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/internal/numtest"
)

// world is this process's rank of the job, for the tests: MPI can be
// initialised once per process, so TestMain owns it.
var world comm.Comm

// sigstopEnv selects TestWatchdogSIGSTOP, which ends the job on purpose;
// scripts/mpi-test.sh runs it on its own and checks how the job ended.
const sigstopEnv = "MEMTRAIN_MPI_SIGSTOP_TEST"

func TestMain(m *testing.M) {
	var err error
	world, err = mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := world.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	if os.Getenv(sigstopEnv) != "" {
		t.Skip("watchdog run")
	}
	commtest.RunRank(t, world, commtest.Config{BF16RankOrder: true})
}

// TestWorldAfterSuite checks that the world itself, not only groups split
// from it, reduces and counts.
func TestWorld(t *testing.T) {
	if os.Getenv(sigstopEnv) != "" {
		t.Skip("watchdog run")
	}
	b := cpu.New(cpu.Options{Threads: 1})
	x := b.Alloc(engine.F32, 3)
	b.Upload(x, []float32{1, float32(world.Rank()), 2})
	before := world.Stats().Get("world", comm.AllReduce)
	if err := world.AllReduce(x); err != nil {
		t.Fatal(err)
	}
	p := float32(world.Size())
	got := cpu.Float32s(x)
	if err := numtest.Equal(got, []float32{p, p * (p - 1) / 2, 2 * p}); err != nil {
		t.Errorf("rank %d: all-reduce over the world: %v", world.Rank(), err)
	}
	after := world.Stats().Get("world", comm.AllReduce)
	if world.Size() > 1 && (after.Total.Calls-before.Total.Calls != 1 || after.Total.Elements-before.Total.Elements != 3) {
		t.Errorf("rank %d: counted %+v then %+v, want one more call of 3 elements", world.Rank(), before.Total, after.Total)
	}
}

// TestWatchdogSIGSTOP is the MPI watchdog check (run by
// scripts/mpi-test.sh with MEMTRAIN_COMM_TIMEOUT short): the world splits
// into Z groups of two, world rank 1 stops itself, and its partner, rank
// 0, must give up on its all-gather, print which one and exit with status
// 3. The script checks the message and that the job ends in time.
func TestWatchdogSIGSTOP(t *testing.T) {
	if os.Getenv(sigstopEnv) == "" {
		t.Skip("set " + sigstopEnv + "=1 (scripts/mpi-test.sh does): this test ends the job")
	}
	if world.Size() < 2 {
		t.Skip("needs two ranks")
	}
	rank := world.Rank()
	z, err := world.Split("z", rank/2, rank%2)
	if err != nil {
		t.Fatal(err)
	}
	world.SetStep(7)
	if rank == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	b := cpu.New(cpu.Options{Threads: 1})
	dst := b.Alloc(engine.F32, 8)
	off, m := comm.Chunk(8, z.Size(), z.Rank())
	if err := z.AllGather(dst, dst.View(off, m)); err != nil {
		t.Fatal(err)
	}
	// Ranks of other pairs get here, and wait for rank 0 at the barrier.
	if err := world.Barrier(); err != nil {
		t.Fatal(err)
	}
	t.Errorf("rank %d: the job went on past a stopped rank", rank)
}
