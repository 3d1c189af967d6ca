package launch

import (
	"github.com/memtrain/memtrain/engine/comm"
	"strings"
	"testing"
)

// TestCheckLaunch: one process is a plain run; several need an MPI build,
// a grid and one rank a process.
func TestCheckLaunch(t *testing.T) {
	for _, tt := range []struct {
		procs, size int
		mpi         bool   // want one rank a process
		err         string // want an error containing this
	}{
		{procs: 0, size: 0},
		{procs: 0, size: 8},
		{procs: 1, size: 4},
		{procs: 4, size: 0, err: "give a grid of 4 ranks"},
		{procs: 4, size: 8, err: "8 ranks, but mpirun or srun started 4 processes"},
		{procs: 4, size: 4, mpi: true},
	} {
		got, err := checkLaunch(tt.procs, tt.size, comm.Grid{Data: 2, X: 2, Y: 1, Z: 1})
		want := tt.mpi
		wantErr := tt.err
		if !MPIBuilt && tt.procs > 1 && tt.size > 0 { // the first thing to fix
			want, wantErr = false, "built without MPI"
		}
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("checkLaunch(%d, %d): %v", tt.procs, tt.size, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("checkLaunch(%d, %d): error %v, want one saying %q", tt.procs, tt.size, err, wantErr)
		case got != want:
			t.Errorf("checkLaunch(%d, %d) = %v, want %v", tt.procs, tt.size, got, want)
		}
	}
}

func TestLaunchedProcs(t *testing.T) {
	for _, name := range append(worldSizeEnvs, localSizeEnvs...) {
		t.Setenv(name, "")
	}
	if n, err := launchedProcs(); n != 0 || err != nil {
		t.Errorf("no launcher: launchedProcs() = %d, %v; want 0, nil", n, err)
	}
	t.Setenv("PMI_SIZE", "8")
	if n, err := launchedProcs(); n != 8 || err != nil {
		t.Errorf("PMI_SIZE=8: launchedProcs() = %d, %v; want 8, nil", n, err)
	}
	if n := localProcs(8); n != 8 {
		t.Errorf("no local size: localProcs(8) = %d, want 8 (assume one node)", n)
	}
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
	if n := localProcs(8); n != 2 {
		t.Errorf("OMPI_COMM_WORLD_LOCAL_SIZE=2: localProcs(8) = %d, want 2", n)
	}
	if n := mpiThreads(3, 8); n != 3 {
		t.Errorf("mpiThreads(3, 8) = %d: --threads is one process's", n)
	}
	t.Setenv("OMPI_COMM_WORLD_SIZE", "four")
	if _, err := launchedProcs(); err == nil || !strings.Contains(err.Error(), "OMPI_COMM_WORLD_SIZE") {
		t.Errorf("OMPI_COMM_WORLD_SIZE=four: error %v, want one naming the variable", err)
	}
}
