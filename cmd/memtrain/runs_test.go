package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memtrain/memtrain/finetune"
)

// child starts memtrain in a child process (this test binary, as the CLI).
func child(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MEMTRAIN_TEST_AS_CLI=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// metricsLines is the number of complete lines of a run's metrics.jsonl.
func metricsLines(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	return bytes.Count(b, []byte("\n"))
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// exitStatus is a finished child's exit code, or -signal when a signal
// ended it.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// TestRunFolderRefusesToOverwrite: a folder that holds a run is continued
// or replaced on request, never overwritten; --resume alone reuses its
// configuration; a finished run says so.
func TestRunFolderRefusesToOverwrite(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"finetune", "--model", base, "--data", ds, "--out", out, "--max-steps", "4", "--batch-size", "2", "--micro-batch", "2", "--schedule.lr", "1e-3"}
	if _, errs, code := memtrain(t, "", append(args, "--stop-after", "2")...); code != 0 {
		t.Fatal(errs)
	}
	before, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	_, errs, code := memtrain(t, "", args...)
	if code != 1 || !strings.Contains(errs, out+" holds a run (step 2, loss ") || !strings.Contains(errs, "continue it with --resume "+out+", or start over in it with --force") {
		t.Errorf("a second run in the folder: exit %d, %q", code, errs)
	}
	if after, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl")); !bytes.Equal(before, after) {
		t.Error("the refused run changed metrics.jsonl")
	}
	// --resume alone: the configuration comes from the folder.
	if stdout, errs, code := memtrain(t, "", "finetune", "--resume", out); code != 0 || !strings.Contains(stdout, "trained 4 steps") {
		t.Errorf("--resume alone: exit %d, %s %s", code, stdout, errs)
	}
	if n := metricsLines(out); n != 4 {
		t.Errorf("%d metrics lines after resuming, want 4", n)
	}
	if stdout, errs, code := memtrain(t, "", "finetune", "--resume", out); code != 0 || !strings.Contains(stdout, "already finished (step 4 of 4)") {
		t.Errorf("resuming a finished run: exit %d, %s %s", code, stdout, errs)
	}
	// --force starts over: the old run's lines are gone.
	if _, errs, code := memtrain(t, "", append(args, "--force", "--max-steps", "3")...); code != 0 {
		t.Fatal(errs)
	}
	if n := metricsLines(out); n != 3 {
		t.Errorf("%d metrics lines after --force, want the new run's 3", n)
	}
	if _, errs, code := memtrain(t, "", append(args, "--force", "--resume", out)...); code != 1 || !strings.Contains(errs, "give one") {
		t.Errorf("--force with --resume: exit %d, %q", code, errs)
	}
	st, err := os.Stat(filepath.Join(out, "checkpoints", "step-00000003"))
	if err != nil || st.Mode().Perm()&0o055 != 0o055 {
		t.Errorf("checkpoint folder mode %v (%v), want group- and world-readable", st.Mode(), err)
	}
}

// TestRunFolderLock: a second process on a run folder exits 1 naming the
// first's PID and host, and the lock goes with its holder.
func TestRunFolderLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("flock")
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "run")
	args := []string{"finetune", "--model", base, "--data", ds, "--out", out, "--max-steps", "100000", "--batch-size", "2", "--micro-batch", "2"}
	first, _ := child(t, args...)
	waitFor(t, "the first run's first step", func() bool { return metricsLines(out) > 0 })
	_, errs, code := memtrain(t, "", append(args, "--resume", out)...)
	want := fmt.Sprintf("%s is in use by pid %d", out, first.Process.Pid)
	if code != 1 || !strings.Contains(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("second process: exit %d, %q; want one line with %q", code, errs, want)
	}
	first.Process.Kill()
	first.Wait()
	// The kernel released the dead holder's lock.
	again := []string{"finetune", "--model", base, "--data", ds, "--out", out, "--max-steps", "1", "--batch-size", "2", "--micro-batch", "2", "--force"}
	if _, errs, code := memtrain(t, "", again...); code != 0 {
		t.Errorf("after the holder died: exit %d, %s", code, errs)
	}
}

// TestFinetuneSignals: SIGINT and SIGTERM, on one rank and on a grid,
// finish the step, save a checkpoint, print the command that resumes and
// exit 130 or 143; the resumed run ends as an uninterrupted one.
func TestFinetuneSignals(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("signals")
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		code int
		grid []string
	}{
		{"SIGINT", syscall.SIGINT, 130, nil},
		{"SIGTERM", syscall.SIGTERM, 143, nil},
		{"SIGTERM on a grid", syscall.SIGTERM, 143, []string{"--parallel", "dp=2,x=2"}},
		{"SIGUSR1", syscall.SIGUSR1, 138, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			args := append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max-steps", "100000", "--batch-size", "2", "--micro-batch", "2"}, tc.grid...)
			cmd, stderr := child(t, args...)
			waitFor(t, "two steps", func() bool { return metricsLines(out) >= 2 })
			cmd.Process.Signal(tc.sig)
			err := cmd.Wait()
			if got := exitStatus(err); got != tc.code {
				t.Fatalf("exit %d, want %d: %s", got, tc.code, stderr)
			}
			latest, err := os.ReadFile(filepath.Join(out, "checkpoints", "latest"))
			if err != nil {
				t.Fatal(err)
			}
			step := 0
			fmt.Sscanf(strings.TrimSpace(string(latest)), "step-%d", &step)
			if n := metricsLines(out); step < 2 || n != step {
				t.Errorf("checkpoint at step %d, %d metrics lines", step, n)
			}
			resume := "resume with: memtrain finetune --resume " + out
			if tc.grid != nil {
				resume += " --parallel dp=2,x=2"
			}
			if !strings.Contains(stderr.String(), fmt.Sprintf("stopped by %v after step %d of 100000", tc.sig, step)) || !strings.HasSuffix(strings.TrimSpace(stderr.String()), resume) {
				t.Errorf("stderr %q, want the stop and %q", stderr, resume)
			}
		})
	}
}

// TestFinetuneKillLoop kills a run by SIGKILL at random moments, again and
// again, resuming it each time; then its metrics (less timing) and final
// weights equal an uninterrupted run's, in f32, with a bf16 export, and
// with checkpoints written in the background (the killed run's being
// written then, or waiting to commit).
func TestFinetuneKillLoop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGKILL")
	}
	// The longest test of the suite (some 80 s on 2 cores): .ci/run runs
	// it as a step of its own, so that go test ./... stays within minutes.
	if os.Getenv("MEMTRAIN_E2E") == "" {
		t.Skip("an end-to-end check that .ci/run runs: set MEMTRAIN_E2E=1 to run it here")
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	const steps = 240
	// Modes: the checkpoint's export dtype, and background saves on a
	// grid of in-process ranks (each writing its own pieces of every
	// checkpoint, Z-sharded; one rank's background save is the same code
	// with one writer).
	// Ten kills in f32, five in each other mode: the kill loop is the
	// longest test of the suite (some 4 s an attempt on 2 cores).
	for _, mode := range []string{"f32", "bf16", "grid-async"} {
		want := map[string]int{"f32": 10}[mode]
		if want == 0 {
			want = 5
		}
		t.Run(mode, func(t *testing.T) {
			runs := t.TempDir()
			args := func(out string) []string {
				a := []string{"finetune", "--model", base, "--data", ds, "--out", out, "--max-steps", strconv.Itoa(steps), "--batch-size", "4", "--micro-batch", "2",
					"--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--save-every", "7", "--eval-every", "11", "--keep", "2"}
				switch mode {
				case "grid-async":
					return append(a, "--save-async", "--parallel", "dp=1,x=1,y=1,z=2")
				}
				return append(a, "--save-dtype", mode)
			}
			a, b := filepath.Join(runs, "a"), filepath.Join(runs, "b")
			if _, errs, code := memtrain(t, "", args(a)...); code != 0 {
				t.Fatal(errs)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(mode))))
			kills := 0
			for attempt := 0; kills < want && attempt < 4*want; attempt++ {
				a := args(b)
				if _, err := os.Stat(filepath.Join(b, "config.yaml")); err == nil {
					a = append(a, "--resume", b)
				}
				// The kill lands at a random moment once the run trains
				// (start-up takes longer on a busy machine): a moment in a
				// step, an evaluation, a save or a commit. The run is long
				// enough (steps) that ten kills land before it ends on
				// a fast machine too: up to 300 ms of this tiny model's
				// steps is some 25 of them an attempt.
				before := metricsLines(b)
				cmd, out := child(t, a...)
				for deadline := time.Now().Add(30 * time.Second); metricsLines(b) <= before && cmd.ProcessState == nil && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				cmd.Process.Signal(syscall.SIGKILL)
				switch st := exitStatus(cmd.Wait()); st {
				case -int(syscall.SIGKILL):
					kills++
				case 0:
					attempt = 1 << 30 // finished before the kill
				default:
					t.Fatalf("run %d: exit %d: %s", attempt, st, out)
				}
			}
			if kills < want {
				t.Fatalf("only %d of %d kills landed", kills, want)
			}
			final := args(b)
			if _, err := os.Stat(filepath.Join(b, "config.yaml")); err == nil {
				final = append(final, "--resume", b)
			}
			if _, errs, code := memtrain(t, "", final...); code != 0 && !strings.Contains(errs, "already finished") {
				t.Fatal(errs)
			}
			if got, want := stripTiming(t, b), stripTiming(t, a); got != want {
				gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Errorf("after %d kills, metrics line %d differs:\n%s\nwant:\n%s", kills, i+1, gl[i], wl[i])
						break
					}
				}
				if len(gl) != len(wl) {
					t.Errorf("after %d kills, %d metrics lines, want %d", kills, len(gl)-1, len(wl)-1)
				}
			}
			// Every weight and moment file (on a grid, each position's
			// pieces) bit for bit.
			files, _ := filepath.Glob(filepath.Join(a, "checkpoints", finetune.StepName(steps), "*.safetensors"))
			if len(files) < 2 {
				t.Fatalf("the uninterrupted run's final checkpoint holds %d .safetensors files", len(files))
			}
			for _, path := range files {
				f := filepath.Base(path)
				x, _ := os.ReadFile(path)
				y, _ := os.ReadFile(filepath.Join(b, "checkpoints", finetune.StepName(steps), f))
				if len(x) == 0 || !bytes.Equal(x, y) {
					t.Errorf("%s: after %d kills the final checkpoint differs from the uninterrupted run's", f, kills)
				}
			}
		})
	}
}

// stripTiming is a run's metrics.jsonl without the fields that measure
// time.
func stripTiming(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, m := range metricsOf(t, dir) {
		delete(m, "tokens_per_s")
		delete(m, "model_flops_ps")
		delete(m, "save_blocked_s")
		if c, ok := m["checkpoint"].(string); ok {
			m["checkpoint"] = filepath.Base(c) // the runs are in two folders
		}
		line, _ := json.Marshal(m)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}
