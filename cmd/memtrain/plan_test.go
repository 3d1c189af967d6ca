package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// planJSON is the part of `plan --json` the tests read.
type planJSON struct {
	Model  string `json:"model"`
	GPUs   int    `json:"gpus"`
	Device struct {
		Name      string  `json:"name"`
		PeakFLOPs float64 `json:"peak_flops"`
	} `json:"device"`
	Efficiency        float64 `json:"efficiency"`
	SeqLen            int     `json:"seq_len"`
	GlobalBatchTokens int64   `json:"global_batch_tokens"`
	State             string  `json:"state"`
	Plans             []struct {
		Grid         struct{ Data, X, Y, Z int } `json:"grid"`
		MicroBatch   int                         `json:"micro_batch"`
		MicroBatches int                         `json:"micro_batches"`
		Recompute    llama.Recompute             `json:"recompute"`
		StepSeconds  float64                     `json:"step_seconds"`
		TokensPerGPU float64                     `json:"tokens_per_second_per_gpu"`
		MFU          float64                     `json:"mfu"`
		MemoryTotal  int64                       `json:"memory_total"`
		Memory       map[string]int64            `json:"memory"`
		Comm         map[string]float64          `json:"comm_seconds"`
	} `json:"plans"`
}

func runPlanJSON(t *testing.T, args ...string) planJSON {
	t.Helper()
	out, errs, code := memtrain(t, "", append([]string{"plan", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("plan %v failed (%d): %s", args, code, errs)
	}
	var r planJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	return r
}

// TestPlan405B is the acceptance case: Llama 3.1 405B on 8192 H100 answers
// within 5 s (it takes well under a second on two slow cores) with grids
// that fit in 80 GB.
func TestPlan405B(t *testing.T) {
	start := time.Now()
	r := runPlanJSON(t, "--model", "llama3.1-405b", "--gpus", "8192", "--gpu", "h100", "--seq-len", "8192")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("plan took %v", d)
	}
	if r.Device.Name != "h100" || r.Device.PeakFLOPs != 989e12 || r.Efficiency != 0 || r.SeqLen != 8192 || r.GlobalBatchTokens != 8192*8192 {
		t.Errorf("header: %+v", r)
	}
	if len(r.Plans) != 10 {
		t.Fatalf("%d plans, want the default top 10", len(r.Plans))
	}
	for i, p := range r.Plans {
		g := p.Grid
		if g.Data*g.X*g.Y*g.Z != 8192 {
			t.Errorf("plan %d: grid %+v", i, g)
		}
		if p.MemoryTotal > 80e9 || p.MemoryTotal != p.Memory["weights"]+p.Memory["gradients"]+p.Memory["optimizer"]+p.Memory["activations"]+p.Memory["workspace"] {
			t.Errorf("plan %d: %d bytes (%v)", i, p.MemoryTotal, p.Memory)
		}
		if i > 0 && !(p.StepSeconds >= r.Plans[i-1].StepSeconds) {
			t.Errorf("plan %d faster than plan %d", i, i-1)
		}
		if !(p.MFU > 0 && p.MFU <= 1) || !(p.TokensPerGPU > 0) {
			t.Errorf("plan %d: MFU %g, %g tokens/s/GPU", i, p.MFU, p.TokensPerGPU)
		}
	}
}

func TestPlanTable(t *testing.T) {
	out, errs, code := memtrain(t, "", "plan", "--model", "llama3.1-8b", "--gpus", "8", "--gpu", "h100", "--top", "3")
	if code != 0 {
		t.Fatalf("plan failed (%d): %s", code, errs)
	}
	for _, want := range []string{
		"peak    989.0 TFLOP/s dense bf16; 67.0 float32 FMA",
		"kernels GEMM 0.72 of peak (large shapes; 712 TFLOP/s), flash attention bf16",
		"step time by kernel class, seconds a step on a rank:",
		"  modelled: the step's kernel list, each kernel at its class's modelled rate",
		"8 × h100",
		"16384 tokens a step: 8 sequences of 2048",
		"tokens/s/GPU", "MFU", "GiB/GPU", "memory per GPU, GiB:", "communication, seconds a step before overlap",
		"exposed", "ckpt GiB/rank",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Four tables of 3 numbered rows each — the grids (MFU in the 11th
	// field, "1.21 s" taking two), memory, communication and the step by
	// kernel class (MFU next to last, before its source) —, none wider
	// than a terminal of 100 columns.
	tables := map[string]int{}
	title := "grids"
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 100 && strings.HasPrefix(strings.TrimSpace(line), "#") || n > 100 && len(strings.Fields(line)) > 5 && strings.Fields(line)[0] == "1" {
			t.Errorf("a table line of %d columns: %q", n, line)
		}
		switch {
		case strings.HasPrefix(line, "memory per GPU"):
			title = "memory"
		case strings.HasPrefix(line, "communication,"):
			title = "comm"
		case strings.HasPrefix(line, "step time by kernel class"):
			title = "kernels"
		}
		f := strings.Fields(line)
		if len(f) < 5 || (f[0] != "1" && f[0] != "2" && f[0] != "3") {
			continue
		}
		tables[title]++
		col := ""
		switch title {
		case "grids":
			col = f[10]
		case "kernels":
			col = f[len(f)-2]
			if f[len(f)-1] != "modelled" {
				t.Errorf("row %q: source %q", line, f[len(f)-1])
			}
		default:
			continue
		}
		if !strings.HasSuffix(col, "%") {
			t.Errorf("row %q: MFU column %q", line, col)
		}
	}
	for _, name := range []string{"grids", "memory", "comm", "kernels"} {
		if tables[name] != 3 {
			t.Errorf("%d rows in the %s table, want 3:\n%s", tables[name], name, out)
		}
	}
}

func TestPlanOptions(t *testing.T) {
	r := runPlanJSON(t, "--model", "llama3.1-8b", "--gpus", "16", "--gpu", "a100", "--recompute", "on",
		"--seq-len", "4096", "--global-batch-tokens", "262144", "--top", "0", "--overlap=false", "--efficiency", "0.5")
	if r.Efficiency != 0.5 || r.SeqLen != 4096 || r.GlobalBatchTokens != 262144 || len(r.Plans) < 10 {
		t.Errorf("%+v", r)
	}
	for _, p := range r.Plans {
		if p.Recompute != llama.RecomputeFull {
			t.Errorf("--recompute on gave %+v", p)
		}
		if got := p.MicroBatch * p.MicroBatches * p.Grid.Data * p.Grid.Z; got != 64 {
			t.Errorf("%+v: %d sequences", p.Grid, got)
		}
	}
}

func TestPlanCheckpointFolder(t *testing.T) {
	dir := initSmall(t)
	r := runPlanJSON(t, "--model", dir, "--gpus", "4", "--gpu", "mi250x", "--seq-len", "64")
	if r.Model != dir || r.SeqLen != 64 || len(r.Plans) == 0 {
		t.Errorf("%+v", r)
	}
	// hidden 32, 4 heads, 2 kv heads: Y is 1 or 2.
	for _, p := range r.Plans {
		if p.Grid.Y > 2 {
			t.Errorf("grid %+v splits 2 kv heads", p.Grid)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "llama3.1-8b", "--gpus", "8", "--gpu", "v100"}, `plan: --gpu: unknown gpu "v100" (want one of a100, h100, h200, mi250x; did you mean "a100"?)`},
		{[]string{"--model", "llama3.1-8b", "--gpus", "0"}, "plan: --gpus 0: want 1 to 1048576"},
		{[]string{"--model", "llama3.1-8b", "--gpus", "-4"}, "plan: --gpus -4: want 1 to 1048576"},
		{[]string{"--gpus", "8"}, "plan: --model is required"},
		{[]string{"--model", "llama9", "--gpus", "8"}, `plan: --model: checkpoints: "llama9" is no checkpoint folder, config file or preset (presets: `},
		{[]string{"--model", "llama3.1-405b", "--gpus", "8", "--gpu", "h100"}, "plan: llama3.1-405b on 8 h100: perfmodel: no grid of 8 h100 fits: the smallest needs "},
		{[]string{"--model", "llama3.1-8b", "--gpus", "8", "--recompute", "maybe"}, `plan: --recompute: perfmodel: unknown recompute mode "maybe"`},
		{[]string{"--model", "llama3.1-8b", "--gpus", "8", "--global-batch-tokens", "1000"}, "not a positive multiple of the sequence length 2048"},
		{[]string{"--model", "llama3.1-8b", "--gpus", "8", "--efficiency", "1.5"}, "plan: --efficiency must lie in (0, 1]"},
		{[]string{"--model", "tiny", "--gpus", "3", "--global-batch-tokens", "4096", "--seq-len", "2048"}, "no grid of 3 ranks divides"},
	} {
		out, errs, code := memtrain(t, "", append([]string{"plan"}, c.args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("plan %v: code %d, stdout %q, stderr %q; want one line with %q", c.args, code, out, errs, c.want)
		}
	}
}

// TestPlanDeviceJSON: a device from a file, with flags overriding it.
func TestPlanDeviceJSON(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev.json")
	dev := `{"name": "box", "peak_flops": 1e11, "memory_bytes": 16000000000, "hbm_bandwidth": 2e10, "node_size": 4,
		"intra_node_bandwidth": 4e9, "inter_node_bandwidth": 4e9, "efficiency": 0.5, "latency": 2e-4,
		"shared_node": true, "wire_bytes": 4, "logit_bytes": 8}`
	if err := os.WriteFile(path, []byte(dev), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", "tiny", "--gpus", "4", "--device-json", path, "--seq-len", "64", "--global-batch-tokens", "1024"}
	r := runPlanJSON(t, args...)
	if r.Device.Name != "box" || r.Device.PeakFLOPs != 1e11 || r.Efficiency != 0.5 || len(r.Plans) == 0 {
		t.Fatalf("plan: %+v", r)
	}
	faster := runPlanJSON(t, append(args, "--peak", "1000")...)
	if faster.Device.PeakFLOPs != 1e12 || !(faster.Plans[0].StepSeconds < r.Plans[0].StepSeconds) {
		t.Errorf("--peak 1000: %g FLOP/s, best step %g s (was %g)", faster.Device.PeakFLOPs, faster.Plans[0].StepSeconds, r.Plans[0].StepSeconds)
	}
	out, errs, code := memtrain(t, "", append([]string{"plan"}, args...)...)
	if code != 0 || !strings.Contains(out, "a node × step efficiency 0.50") || !strings.Contains(out, "200 µs a call") {
		t.Errorf("table (%d): %s%s", code, out, errs)
	}
	if err := os.WriteFile(path, []byte(`{"name": "box", "peek_flops": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := memtrain(t, "", append([]string{"plan"}, args...)...); code == 0 || !strings.Contains(errs, "peek_flops") {
		t.Errorf("unknown field: status %d, %s", code, errs)
	}
}

// TestPlanCheckpointColumns: each grid's checkpoint is the model's 12
// bytes a parameter, in 2·X·Y·Z piece files, of which a writing rank's
// share is its shards' (a bound with the norms counted on every rank);
// the save takes the whole at the stated filesystem bandwidth at least.
func TestPlanCheckpointColumns(t *testing.T) {
	out, errs, code := memtrain(t, "", "plan", "--json", "--model", "llama3.1-405b", "--gpus", "8192", "--gpu", "h100", "--fs-bandwidth", "200", "--top", "20")
	if code != 0 {
		t.Fatal(errs)
	}
	var r struct {
		Params int64 `json:"params"`
		Plans  []struct {
			Grid       struct{ Data, X, Y, Z int } `json:"grid"`
			Checkpoint struct {
				BytesPerRank int64   `json:"bytes_per_rank"`
				Bytes        int64   `json:"bytes"`
				Files        int     `json:"files"`
				SaveSeconds  float64 `json:"save_seconds"`
			} `json:"checkpoint"`
		} `json:"plans"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Plans {
		c, g := p.Checkpoint, p.Grid
		positions := int64(g.X * g.Y * g.Z)
		if c.Bytes != 12*r.Params || c.Files != int(2*positions) || c.BytesPerRank*positions < c.Bytes || c.BytesPerRank*positions > c.Bytes+c.Bytes/10 ||
			!(c.SaveSeconds >= float64(c.Bytes)/200e9) {
			t.Errorf("grid %+v: checkpoint %+v", g, c)
		}
	}
	if _, errs, code := memtrain(t, "", "plan", "--model", "llama3.1-8b", "--gpus", "8", "--fs-bandwidth", "0"); code != 1 || !strings.Contains(errs, "--fs-bandwidth") {
		t.Errorf("--fs-bandwidth 0: exit %d, %q", code, errs)
	}
	text, _, _ := memtrain(t, "", "plan", "--model", "llama3.1-405b", "--gpus", "8192", "--gpu", "h100", "--top", "1")
	if !strings.Contains(text, "ckpt GiB/rank") || !strings.Contains(text, "filesystem 100 GB/s") {
		t.Errorf("table without the checkpoint columns:\n%s", text)
	}
}

// TestPlanIsTheEngines ties plan's memory per GPU to the engine's
// accounting, grid by grid, and checks that every number says where it
// comes from: the datasheet, an assumption, a flag, or the model.
func TestPlanIsTheEngines(t *testing.T) {
	args := []string{"--model", "llama3.1-8b", "--gpus", "8", "--gpu", "h200", "--seq-len", "8192", "--top", "0"}
	out, errs, code := memtrain(t, "", append([]string{"plan", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("plan: %s", errs)
	}
	var r struct {
		planJSON
		Sources map[string]string `json:"sources"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	if len(r.Plans) < 2 {
		t.Fatalf("%d plans", len(r.Plans))
	}
	for _, pl := range r.Plans {
		g := pl.Grid
		w := llama.Work{Grid: comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}, Overlap: parallel.AllOverlap(), Train: true,
			Recompute: pl.Recompute, Moments: 2, Batch: pl.MicroBatch, SeqLen: 8192, Micro: pl.MicroBatches}
		it := llama.Itemize(cfg, w)
		if pl.MemoryTotal != llama.Memory(cfg, w).Total() || pl.Memory["weights"] != it.Weights || pl.Memory["activations"] != it.Activations || pl.Memory["workspace"] != it.Gathered {
			t.Errorf("%+v: plan's memory %d %v, the engine's %+v", g, pl.MemoryTotal, pl.Memory, it)
		}
	}
	for k, prefix := range map[string]string{"peak": "datasheet", "memory": "as the device reports it (143,771 MiB)", "links": "datasheet",
		"memory_per_gpu": "the engine's accounting", "predicted": "step time, tokens/s, MFU"} {
		if !strings.HasPrefix(r.Sources[k], prefix) {
			t.Errorf("source of %s: %q, want %q…", k, r.Sources[k], prefix)
		}
	}
	text, _, code := memtrain(t, "", append([]string{"plan", "--efficiency", "0.3", "--peak", "900000"}, args...)...)
	if code != 0 {
		t.Fatal("plan failed")
	}
	if _, ok := r.Sources["efficiency"]; ok {
		t.Errorf("a table GPU's sources name a step efficiency: %q", r.Sources["efficiency"])
	}
	for _, want := range []string{"peak: given (--peak)", "kernels: GEMM given (--efficiency) for large GEMMs", "attention modelled: FlashAttention-2", "predicted by the performance model", "memory per GPU: the engine's accounting"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan's table lacks %q:\n%s", want, text)
		}
	}
}

// TestPlanBF16: at precision bf16 the planner ranks every grid the engine
// computes mixed precision on (all of them), with the engine's bf16
// accounting: grids that shard the model over x, y and z among them, so
// that a model whose bf16 run does not fit a GPU whole (8B on two H200 at
// 8K tokens) is planned sharded.
func TestPlanBF16(t *testing.T) {
	for _, c := range []struct {
		args   []string
		preset string
		seq    int
	}{
		{[]string{"--model", "llama3.2-1b", "--gpus", "8", "--gpu", "h200", "--seq-len", "4096", "--precision", "bf16", "--top", "0"}, "llama3.2-1b", 4096},
		{[]string{"--model", "llama3.1-8b", "--gpus", "2", "--gpu", "h200", "--seq-len", "8192", "--precision", "bf16", "--top", "0"}, "llama3.1-8b", 8192},
	} {
		r := runPlanJSON(t, c.args...)
		p, err := checkpoints.LookupPreset(c.preset)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Plans) == 0 {
			t.Fatalf("%s: no plan", c.preset)
		}
		split := false
		for _, pl := range r.Plans {
			g := pl.Grid
			split = split || g.X*g.Y*g.Z > 1
			w := llama.Work{Grid: comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}, Overlap: parallel.AllOverlap(), Train: true, Recompute: pl.Recompute,
				Moments: 2, Batch: pl.MicroBatch, SeqLen: c.seq, Micro: pl.MicroBatches, Activations: engine.BF16}
			if want := llama.Memory(p.Config(), w).Total(); pl.MemoryTotal != want {
				t.Errorf("%s %+v: %d bytes, the engine's %d", c.preset, g, pl.MemoryTotal, want)
			}
		}
		if !split {
			t.Errorf("%s: no bf16 plan splits the model", c.preset)
		}
	}
	if _, errs, code := memtrain(t, "", "plan", "--model", "tiny", "--gpus", "2", "--precision", "fp8"); code == 0 || !strings.Contains(errs, "--precision") {
		t.Errorf("fp8 (%d): %s", code, errs)
	}
}

// TestPlanMeasured: --measured replaces the modelled step of the grids
// whose rank's work a bench step line measured, and says so.
func TestPlanMeasured(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "step.jsonl")
	line := fmt.Sprintf(`{"preset":"llama3.2-1b","params":%d,"batch":1,"seq_len":4096,"recompute":false,"precision":"bf16","step_ms_median":2000}`, p.Config().Params().Total)
	if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", "llama3.2-1b", "--gpus", "2", "--gpu", "h200", "--seq-len", "4096", "--precision", "bf16", "--recompute", "off", "--measured", path}
	r := runPlanJSON(t, args...)
	// bf16 plans split the model too; only dp=2's rank does the measured
	// work (the whole model, one sequence of 4096).
	dp := -1
	for i, pl := range r.Plans {
		if pl.Grid.Data == 2 && pl.MicroBatch == 1 {
			dp = i
		}
	}
	if dp < 0 {
		t.Fatalf("no dp=2 plan: %+v", r.Plans)
	}
	// dp=2: each rank's step is the measured one (to rounding), plus
	// whatever of the gradients' all-reduce its backward does not hide.
	if got := r.Plans[dp].StepSeconds; !(got > 1.999999 && got < 2.1) {
		t.Errorf("step %g s, want the measured 2 s and any exposed communication", got)
	}
	for i, pl := range r.Plans {
		if i != dp && pl.StepSeconds > 1.5 {
			t.Errorf("plan %+v: step %g s, the measured dp=2 step's; want its own modelled one", pl.Grid, pl.StepSeconds)
		}
	}
	out, errs, code := memtrain(t, "", append([]string{"plan"}, args...)...)
	if code != 0 || !strings.Contains(out, "measured: bench step ("+path+":1)") || !strings.Contains(out, "%  measured") {
		t.Errorf("table (%d): %s%s", code, out, errs)
	}
	if _, errs, code := memtrain(t, "", "plan", "--model", "tiny", "--gpus", "1", "--measured", filepath.Join(t.TempDir(), "none")); code == 0 || !strings.Contains(errs, "plan: --measured") {
		t.Errorf("a missing file: status %d, %s", code, errs)
	}
}

// TestPlanZeRO: --zero 1 shards AdamW's moments over the data ranks — a
// data-parallel grid's optimizer memory per GPU shrinks by the data size —
// and a stage the engine has not is refused.
func TestPlanZeRO(t *testing.T) {
	args := []string{"--model", "llama3.1-8b", "--gpus", "8", "--gpu", "h200", "--seq-len", "4096", "--precision", "bf16", "--top", "0"}
	optimizer := func(r planJSON) map[[4]int]int64 {
		m := map[[4]int]int64{}
		for _, p := range r.Plans {
			g := p.Grid
			m[[4]int{g.Data, g.X, g.Y, g.Z}] = p.Memory["optimizer"]
		}
		return m
	}
	without, with := optimizer(runPlanJSON(t, args...)), optimizer(runPlanJSON(t, append(args, "--zero", "1")...))
	compared := 0
	for g, b := range without {
		z, ok := with[g]
		if !ok || g[0] == 1 {
			continue
		}
		compared++
		if want := (b + int64(g[0]) - 1) / int64(g[0]); z > want+(1<<20) || z < want-(1<<20) {
			t.Errorf("grid %v: optimizer %d bytes with --zero 1, want about %d (%d ÷ %d)", g, z, want, b, g[0])
		}
	}
	if compared == 0 {
		t.Errorf("no data-parallel grid planned both ways: %v, %v", without, with)
	}
	if _, errs, code := memtrain(t, "", append([]string{"plan", "--zero", "2"}, args...)...); code != 1 || !strings.Contains(errs, "--zero 2: want 0 or 1") {
		t.Errorf("--zero 2: exit %d, %q", code, errs)
	}
}

// TestPlanCheapest: --cheapest prints the fewest GPUs that fit with the
// state options it chose (Llama 3.1 8B at 8,192 tokens in bf16: one H200
// with the split master, perfmodel's TestCheapestTargets), and --lora
// plans adapters on a frozen base.
func TestPlanCheapest(t *testing.T) {
	r := runPlanJSON(t, "--model", "llama3.1-8b", "--gpus", "8", "--gpu", "h200", "--seq-len", "8192", "--precision", "bf16", "--cheapest")
	if r.GPUs != 1 || r.State != "zero 0, master split, moments fp32" || r.GlobalBatchTokens != 8192 || len(r.Plans) == 0 {
		t.Errorf("--cheapest: %d GPUs, state %q, %d tokens, %d plans", r.GPUs, r.State, r.GlobalBatchTokens, len(r.Plans))
	}
	r = runPlanJSON(t, "--model", "llama3.1-8b", "--gpus", "1", "--gpu", "h200", "--seq-len", "8192", "--precision", "bf16", "--lora", "8")
	if len(r.Plans) == 0 || r.Plans[0].Memory["gradients"] >= r.Plans[0].Memory["weights"]/100 || !strings.Contains(r.State, "LoRA rank 8") {
		t.Errorf("--lora 8: state %q, plans %+v", r.State, r.Plans)
	}
}

// TestPlanFused: --fused plans with AdamW fused into the backward (the
// gradients of the units in flight, one micro-batch a step, named on the
// state line), and --cheapest chooses it where it saves GPUs: Llama 3.1
// 70B at 8,192 tokens in bf16 on 4 H200s (perfmodel's TestCheapestFused).
func TestPlanFused(t *testing.T) {
	args := []string{"--model", "llama3.1-8b", "--gpus", "8", "--gpu", "h200", "--seq-len", "4096", "--precision", "bf16", "--top", "0"}
	without, with := runPlanJSON(t, args...), runPlanJSON(t, append(args, "--fused")...)
	if len(with.Plans) == 0 || !strings.Contains(with.State, "optimizer fused into the backward") || strings.Contains(without.State, "fused") {
		t.Fatalf("--fused: state %q (without: %q), %d plans", with.State, without.State, len(with.Plans))
	}
	unfused := map[[4]int]int64{}
	for _, p := range without.Plans {
		unfused[[4]int{p.Grid.Data, p.Grid.X, p.Grid.Y, p.Grid.Z}] = p.Memory["gradients"]
	}
	compared := 0
	for _, p := range with.Plans {
		u, ok := unfused[[4]int{p.Grid.Data, p.Grid.X, p.Grid.Y, p.Grid.Z}]
		if p.MicroBatches != 1 || ok && p.Memory["gradients"]*4 > u {
			t.Errorf("--fused %+v: %d micro-batches, gradients %d bytes (unfused %d)", p.Grid, p.MicroBatches, p.Memory["gradients"], u)
		}
		if ok {
			compared++
		}
	}
	if compared == 0 {
		t.Error("no grid planned both ways")
	}
	r := runPlanJSON(t, "--model", "llama3.1-70b", "--gpus", "8", "--gpu", "h200", "--seq-len", "8192", "--precision", "bf16", "--cheapest")
	if r.GPUs != 4 || !strings.Contains(r.State, "optimizer fused into the backward") || len(r.Plans) == 0 {
		t.Errorf("70B --cheapest: %d GPUs, state %q, %d plans", r.GPUs, r.State, len(r.Plans))
	}
}
