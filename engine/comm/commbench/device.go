package commbench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/engine/perfmodel"
)

// MeasuredDevice is this machine as the performance model sees it
// (perfmodel.MeasuredDevice), from the results and fits (Bench.Run) of a
// world of `world` ranks on this node: the bandwidth and latency of the
// largest group measured with every group busy, the situation of a
// training step, in which all ranks communicate at once, and every
// result as a timing. peak is the node's compute peak in FLOP/s, eff the
// fraction of it a training step reaches.
func MeasuredDevice(results []Result, fits []Fit, world int, peak, eff float64) (perfmodel.Device, error) {
	return measuredDevice(results, fits, world, peak, eff, totalMemory())
}

// measuredDevice is MeasuredDevice on a machine of mem bytes.
func measuredDevice(results []Result, fits []Fit, world int, peak, eff float64, mem int64) (perfmodel.Device, error) {
	if len(fits) == 0 {
		return perfmodel.Device{}, errors.New("no fit to measure a device with")
	}
	best := fits[0]
	for _, f := range fits {
		if f.Ranks > best.Ranks {
			best = f
		}
	}
	if mem <= 0 {
		return perfmodel.Device{}, errors.New("cannot read this machine's memory size (/proc/meminfo)")
	}
	var timings []perfmodel.Timing
	for _, r := range results {
		timings = append(timings, perfmodel.Timing{Op: r.Op, Ranks: r.Ranks, Bytes: r.Bytes, Seconds: r.TimeUS / 1e6})
	}
	return perfmodel.MeasuredDevice(perfmodel.Measured{
		Name:      fmt.Sprintf("cpu-%d", world),
		PeakFLOPs: peak, Efficiency: eff,
		BusBandwidth: best.BusBW * 1e9, Latency: best.LatencyUS / 1e6, Ranks: world,
		MemoryBytes: mem, Timings: timings,
	})
}

// totalMemory is the machine's memory in bytes (Linux's MemTotal), or 0.
func totalMemory() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
