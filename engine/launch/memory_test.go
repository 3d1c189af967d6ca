package launch

import (
	"runtime"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

func TestMemory(t *testing.T) {
	cpuGrid := comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}
	gpu2 := engine.Device{Kind: engine.CUDA, Index: 2}
	tests := []struct {
		name  string
		spec  Spec
		env   string // MEMTRAIN_MEMORY_LIMIT; "": unset
		want  []engine.DeviceMemory
		known bool // the host's Free is read from the machine (Linux)
	}{
		{"one CPU rank", Spec{}, "", []engine.DeviceMemory{{Device: "host", Ranks: 1}}, true},
		{"in-process ranks share the host", Spec{Grid: cpuGrid}, "", []engine.DeviceMemory{{Device: "host", Ranks: 4}}, true},
		{"the limit overrides the host", Spec{Grid: cpuGrid}, "24GiB", []engine.DeviceMemory{{Device: "host", Free: 24 << 30, Source: MemoryLimitEnv, Ranks: 4}}, false},
		{"and a GPU", Spec{Device: gpu2}, "1.5 GB", []engine.DeviceMemory{{Device: "cuda:2", Free: 1_500_000_000, Source: MemoryLimitEnv, Ranks: 1}}, false},
	}
	for _, tt := range tests {
		t.Setenv(MemoryLimitEnv, tt.env)
		l, err := New(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Memory()
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("%s: %+v, %v", tt.name, got, err)
		}
		for i, w := range tt.want {
			g := got[i]
			if tt.known {
				if runtime.GOOS == "linux" && (g.Free <= 0 || g.Source == "") {
					t.Errorf("%s: the host's memory unread: %+v", tt.name, g)
				}
				g.Free, g.Source = 0, ""
			}
			if g != w {
				t.Errorf("%s: %+v, want %+v", tt.name, g, w)
			}
		}
	}
	// Under mpirun each process runs one rank, and the job's processes
	// on a node share its memory.
	t.Setenv(MemoryLimitEnv, "8GiB")
	mpi := &Launcher{spec: Spec{Grid: cpuGrid}, mpi: true, local: 3}
	if got, err := mpi.Memory(); err != nil || len(got) != 1 || got[0] != (engine.DeviceMemory{Device: "host", Free: 8 << 30, Source: MemoryLimitEnv, Ranks: 3}) {
		t.Errorf("under MPI: %+v, %v", got, err)
	}
	t.Setenv(MemoryLimitEnv, "lots")
	l, _ := New(Spec{})
	if _, err := l.Memory(); err == nil || !strings.HasPrefix(err.Error(), `launch: MEMTRAIN_MEMORY_LIMIT="lots": `) {
		t.Errorf("a malformed limit: %v", err)
	}
}
