package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/engine/parallel"
)

// The grid on GPUs runs here on engine/cuda's fake CUDA libraries
// (testdata/fakecuda there: eight fake GPUs that run the real kernels on
// the CPU, and an in-memory NCCL). They are found through
// $MEMTRAIN_CUDA_LIB_DIR, which must be set before CUDA is first loaded
// in a process, so these tests run memtrain, or themselves, in a child
// process.

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeSkip string // why the fake is unavailable
	fakeErr  error
)

// fakeCUDADir returns the folder of the fake libraries, which engine/cuda's
// tests build with g++ and name (go test -run TestFakeCUDADir), or skips
// the test where they cannot be built.
func fakeCUDADir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the fake CUDA libraries")
	}
	fakeOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			fakeSkip = "no go command to build engine/cuda's fake CUDA libraries with"
			return
		}
		cmd := exec.Command(goTool, "test", "-count=1", "-run", "^TestFakeCUDADir$", "-v", "github.com/memtrain/memtrain/engine/cuda")
		out, err := cmd.CombinedOutput()
		if m := regexp.MustCompile(`MEMTRAIN_CUDA_LIB_DIR=(\S+)`).FindSubmatch(out); err == nil && m != nil {
			fakeDir = string(m[1])
			return
		}
		if m := regexp.MustCompile(`--- SKIP: TestFakeCUDADir[^\n]*\n\s*(\S[^\n]*)`).FindSubmatch(out); err == nil && m != nil {
			fakeSkip = string(m[1])
			return
		}
		fakeErr = fmt.Errorf("go test -run TestFakeCUDADir ./engine/cuda: %v\n%s", err, out)
	})
	switch {
	case fakeErr != nil:
		t.Fatal(fakeErr)
	case fakeSkip != "":
		t.Skip(fakeSkip)
	}
	return fakeDir
}

// fakeEnv is the environment of a child process on the fake GPUs, with a
// kernel cache of its own (a real GPU must never load the fake's kernels)
// and exact float32 GEMMs.
func fakeEnv(t *testing.T, extra ...string) []string {
	return append(os.Environ(), append([]string{
		cuda.LibDirEnv + "=" + fakeCUDADir(t),
		"MEMTRAIN_CUDA_CACHE=" + t.TempDir(),
		cuda.GemmEnv + "=" + cuda.GemmF32,
	}, extra...)...)
}

// memtrainOnFake runs memtrain in a child process on the fake GPUs. It
// returns standard error and the exit code, and the number of kernels the
// fake GPUs ran, which the fake traces to standard error.
func memtrainOnFake(t *testing.T, args ...string) (stderr string, code, kernels int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = fakeEnv(t, "MEMTRAIN_TEST_AS_CLI=1", "MEMTRAIN_FAKECUDA_TRACE=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	var rest strings.Builder
	for _, line := range strings.SplitAfter(errb.String(), "\n") {
		if strings.HasPrefix(line, "fakecuda: launch ") {
			kernels++
		} else {
			rest.WriteString(line)
		}
	}
	return rest.String(), code, kernels
}

// byteTokenizer writes a folder holding a byte-fallback BPE tokenizer with
// no merges: <unk>, <s>, </s>, the 256 bytes and "▁", 260 tokens. The
// fake GPUs are slow, and a model of Llama 2's 32000 tokens would spend
// seconds a step in its embedding and head alone.
func byteTokenizer(t *testing.T) string {
	t.Helper()
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	vocab["▁"] = len(vocab)
	var added []map[string]any
	for id, content := range []string{"<unk>", "<s>", "</s>"} {
		added = append(added, map[string]any{"id": id, "content": content, "special": true})
	}
	tok := map[string]any{
		"added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "vocab": vocab, "merges": []string{}},
	}
	dir := t.TempDir()
	raw, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": "<s>", "eos_token": "</s>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestParallelCUDAFinetuneEmulated: finetune on grids of four fake GPUs,
// one a rank with NCCL communicators, logs one CPU rank's metrics within
// 1e-5; and a grid larger than the GPUs there are is refused in one line.
func TestParallelCUDAFinetuneEmulated(t *testing.T) {
	fakeCUDADir(t)
	dir, tok := t.TempDir(), byteTokenizer(t)
	base, ds := filepath.Join(dir, "base"), filepath.Join(dir, "ds")
	if _, errs, code := memtrain(t, "", append([]string{"init", "--out", base, "--tokenizer", tok, "--seed", "3"}, small...)...); code != 0 {
		t.Fatal(errs)
	}
	raw, err := assets.Read(assets.Austen)
	if err != nil {
		t.Fatal(err)
	}
	corpus := writeFile(t, "austen.jsonl", string(bytes.Join(bytes.SplitAfter(raw, []byte("\n"))[:40], nil)))
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", tok, "--out", ds,
		"--seq-len", "32", "--mode", "document", "--holdout", "0.1", "--bos", "--eos"); code != 0 {
		t.Fatal(errs)
	}
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "2", "--batch_size", "4",
			"--micro_batch", "2", "--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--eval_every", "2"}, extra...)
	}
	one := filepath.Join(runs, "cpu")
	if _, errs, code := memtrain(t, "", args(one)...); code != 0 {
		t.Fatal(errs)
	}
	want := metricsOf(t, one)
	for _, extra := range [][]string{
		{"--device", "cuda", "--parallel", "dp=2,x=2"},
		{"--device", "cuda:4", "--parallel", "y=2,z=2", "--overlap", "none"}, // GPUs 4 to 7
	} {
		out := filepath.Join(runs, strings.Join(extra, ""))
		errs, code, kernels := memtrainOnFake(t, args(out, extra...)...)
		if code != 0 || kernels == 0 {
			t.Fatalf("%v: exit %d, %d kernels on the fake GPUs: %s", extra, code, kernels, errs)
		}
		got := metricsOf(t, out)
		if len(got) != len(want) {
			t.Fatalf("%v: %d metrics lines, want %d", extra, len(got), len(want))
		}
		for i := range want {
			for _, k := range []string{"loss", "loss_all", "grad_norm", "eval_loss", "kept_tokens"} {
				w, _ := want[i][k].(float64)
				g, _ := got[i][k].(float64)
				if math.Abs(g-w) > 1e-5*math.Abs(w) {
					t.Errorf("%v step %d %s: %v, one CPU rank %v", extra, i+1, k, g, w)
				}
			}
		}
	}

	errs, code, _ := memtrainOnFake(t, args(filepath.Join(runs, "big"), "--device", "cuda:6", "--parallel", "dp=2,x=2")...)
	if wantErr := "memtrain: finetune: --parallel dp=2,x=2 has 4 ranks, one a GPU (cuda:6 to cuda:9), but 8 CUDA device(s) found\n"; code != 1 || errs != wantErr {
		t.Errorf("a grid larger than the GPUs: exit %d, stderr %q; want 1, %q", code, errs, wantErr)
	}
}

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
		cmd.Env = fakeEnv(t, joinNCCLChild+"=1")
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
		boot := comm.NewLocal(shape.Size())
		errs := make([]error, len(boot))
		var wg sync.WaitGroup
		for r, w := range boot {
			wg.Go(func() {
				errs[r] = joinNCCL(w, shape, parallel.AllOverlap(), first, fn)
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
			if got[2] != float32(want) {
				return fmt.Errorf("group %q summed %v, want %d", c.Group(), got, want)
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

// Without CUDA, a grid on GPUs fails in one line saying what was looked
// for, before anything is loaded.
func TestParallelCUDAWithoutGPU(t *testing.T) {
	if n, err := cuda.DeviceCount(""); err == nil {
		t.Skipf("%d CUDA device(s) here", n)
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	_, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", t.TempDir(), "--max_steps", "1",
		"--device", "cuda", "--parallel", "dp=2")
	if lines := strings.Split(strings.TrimSpace(errs), "\n"); code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "memtrain: finetune: cuda: ") {
		t.Errorf("exit %d, stderr %q; want one line from the CUDA loader", code, errs)
	}
}
