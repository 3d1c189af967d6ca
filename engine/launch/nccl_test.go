package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cuda/cudatest"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// joinNCCLChild names the variable that makes TestJoinNCCLEmulated run its
// body: in a child process on the fake GPUs.
const joinNCCLChild = "MEMTRAIN_TEST_JOIN_NCCL"

// TestJoinNCCLEmulated runs the MPI launcher's GPU path with in-process
// ranks standing in for the MPI world: each rank takes the GPU of its
// rank, rank 0's NCCL id reaches all over the host world, and the grid's
// groups sum device tensors; when some ranks cannot start, every rank
// fails rather than waiting in NCCL.
func TestJoinNCCLEmulated(t *testing.T) {
	if os.Getenv(joinNCCLChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestJoinNCCLEmulated$", "-test.v")
		cmd.Env = cudatest.Env(t, joinNCCLChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestJoinNCCLEmulated") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	for _, name := range localRankEnvs {
		t.Setenv(name, "") // as under no launcher: the world rank is the local rank
	}
	shape := comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}
	join := func(first int, fn func(g *parallel.Grid, b engine.Backend) error) []error {
		boot := local.New(shape.Size())
		errs := make([]error, len(boot))
		var wg sync.WaitGroup
		for r, w := range boot {
			wg.Go(func() {
				errs[r] = joinNCCL(w, shape, parallel.AllOverlap(), first, func(rk Rank) error { return fn(rk.Grid, rk.Backend) })
				w.Close()
			})
		}
		wg.Wait()
		return errs
	}

	errs := join(2, func(g *parallel.Grid, b engine.Backend) error {
		if want := (engine.Device{Kind: engine.CUDA, Index: 2 + g.Rank()}); b.Device() != want {
			return fmt.Errorf("on %v, want %v", b.Device(), want)
		}
		// Each group sums its ranks' world ranks + 1.
		for _, c := range []comm.Comm{g.World, g.X, g.Data} {
			x := b.Alloc(engine.F32, 3)
			defer b.Free(x)
			b.Fill(x, float32(g.Rank()+1))
			if err := c.AllReduce(x); err != nil {
				return err
			}
			got := make([]float32, 3)
			b.Download(got, x)
			want := 0
			for r := range shape.Size() {
				if d, xx, _, _ := shape.Coords(r); (c == g.World) || (c == g.X && d == g.At.Data) || (c == g.Data && xx == g.At.X) {
					want += r + 1
				}
			}
			if err := numtest.Equal(got, []float32{float32(want), float32(want), float32(want)}); err != nil {
				return fmt.Errorf("group %q's sum of ranks + 1: %v", c.Group(), err)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	// From cuda:6, ranks 2 and 3 would need cuda:8 and cuda:9 of 8.
	errs = join(6, func(*parallel.Grid, engine.Backend) error { return errors.New("ran") })
	for r, want := range []string{
		"2 other rank(s) failed to start on their GPU",
		"2 other rank(s) failed to start on their GPU",
		"local rank 2 on this node takes cuda:8, but this process sees 8 CUDA device(s): start at most 2 process(es) a node, or bind one GPU to each (CUDA_VISIBLE_DEVICES)",
		"local rank 3 on this node takes cuda:9, but this process sees 8 CUDA device(s): start at most 2 process(es) a node, or bind one GPU to each (CUDA_VISIBLE_DEVICES)",
	} {
		if errs[r] == nil || errs[r].Error() != want {
			t.Errorf("rank %d: %v, want %q", r, errs[r], want)
		}
	}
}

func TestMPIDevice(t *testing.T) {
	for _, tt := range []struct {
		first, local, count, dev int
		err                      string
	}{
		{0, 0, 8, 0, ""},
		{0, 7, 8, 7, ""},
		{2, 3, 8, 5, ""},
		{0, 5, 1, 0, ""}, // one GPU bound to each process
		{0, 8, 8, 0, "local rank 8 on this node takes cuda:8, but this process sees 8 CUDA device(s): start at most 8 process(es) a node"},
		{1, 0, 1, 0, "local rank 0 on this node takes cuda:1, but this process sees 1 CUDA device(s)"},
	} {
		dev, err := mpiDevice(tt.first, tt.local, tt.count)
		if tt.err == "" && (err != nil || dev != tt.dev) || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("mpiDevice(%d, %d, %d) = %d, %v; want %d, %q", tt.first, tt.local, tt.count, dev, err, tt.dev, tt.err)
		}
	}
	for _, name := range localRankEnvs {
		t.Setenv(name, "")
	}
	if r, err := localRank(5); r != 5 || err != nil {
		t.Errorf("no launcher: localRank(5) = %d, %v; want the world rank", r, err)
	}
	t.Setenv("SLURM_LOCALID", "3")
	if r, err := localRank(5); r != 3 || err != nil {
		t.Errorf("SLURM_LOCALID=3: localRank(5) = %d, %v", r, err)
	}
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x")
	if _, err := localRank(5); err == nil || !strings.Contains(err.Error(), "OMPI_COMM_WORLD_LOCAL_RANK") {
		t.Errorf("OMPI_COMM_WORLD_LOCAL_RANK=x: %v, want an error naming it", err)
	}
}
