package launch

import (
	"fmt"
	"os"
	"strings"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/internal/sysmem"
	"github.com/memtrain/memtrain/internal/units"
)

// MemoryLimitEnv names the variable that sets what every device of a
// launch has free, in bytes as internal/units reads sizes ("24GiB",
// "500GB"), instead of what the machine says: for tests of the memory
// checks, and to keep a run within less than the machine has.
const MemoryLimitEnv = "MEMTRAIN_MEMORY_LIMIT"

// Spec returns the launch's spec.
func (l *Launcher) Spec() Spec { return l.spec }

// Memory reads what the devices this process's ranks compute on have
// free, before anything is allocated, for the engine's memory check
// (llama.Preflight): the host for CPU ranks (internal/sysmem: MemAvailable
// within the cgroup's limit), shared by every rank in this process, or
// under mpirun by the job's processes on this node; each
// rank's GPU (cuda.FreeMemory), or under mpirun the GPU of this process's
// local rank. A device that cannot be read is unknown (Free −1) and goes
// unchecked: opening its backend then says what is wrong.
// MemoryLimitEnv overrides every reading.
func (l *Launcher) Memory() ([]engine.DeviceMemory, error) {
	limit, override, err := memoryLimit()
	if err != nil {
		return nil, err
	}
	s := l.spec
	if s.Device.Kind != engine.CUDA {
		ranks := l.Ranks()
		if l.mpi {
			// One rank a process, and the node's processes share its
			// memory: each checks for all of them.
			ranks = max(l.local, 1)
		}
		dev := engine.DeviceMemory{Device: "host", Free: -1, Ranks: ranks}
		switch a, ok := sysmem.Host(); {
		case override:
			dev.Free, dev.Source = limit, MemoryLimitEnv
		case ok:
			dev.Free, dev.Source = a.Bytes, a.Source
		}
		return []engine.DeviceMemory{dev}, nil
	}
	var devices []int
	switch {
	case l.mpi:
		if d, ok := l.mpiGPU(); ok {
			devices = []int{d}
		}
	case s.Grid == (comm.Grid{}):
		devices = []int{s.Device.Index}
	default:
		for r := range s.Grid.Size() {
			devices = append(devices, s.Device.Index+r)
		}
	}
	var out []engine.DeviceMemory
	for _, d := range devices {
		dev := engine.DeviceMemory{Device: fmt.Sprintf("cuda:%d", d), Free: -1, Ranks: 1}
		if override {
			dev.Free, dev.Source = limit, MemoryLimitEnv
		} else if free, _, err := cuda.FreeMemory("", d); err == nil {
			dev.Free, dev.Source = free, "cuMemGetInfo"
		}
		out = append(out, dev)
	}
	return out, nil
}

// mpiGPU is the GPU this process's rank will open under mpirun
// (mpiDevice), when the launcher's environment says its local rank.
func (l *Launcher) mpiGPU() (int, bool) {
	local, err := localRank(-1)
	if err != nil || local < 0 {
		return 0, false
	}
	count, err := cuda.DeviceCount("")
	if err != nil {
		return 0, false
	}
	d, err := mpiDevice(l.spec.Device.Index, local, count)
	return d, err == nil
}

// memoryLimit reads MemoryLimitEnv: its bytes, and whether it is set.
func memoryLimit() (int64, bool, error) {
	s, ok := os.LookupEnv(MemoryLimitEnv)
	if !ok || strings.TrimSpace(s) == "" {
		return 0, false, nil
	}
	n, err := units.ParseBytes(s)
	if err != nil {
		return 0, false, fmt.Errorf("launch: %s=%q: %w", MemoryLimitEnv, s, err)
	}
	return n, true, nil
}
