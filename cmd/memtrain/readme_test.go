package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints/hub/hubtest"
)

// The README runs as written. TestREADMERuns builds the memtrain binary and
// runs the README's shell blocks in order, in one temporary folder that stands
// in for the clone (the repository's data/ is linked into it), with memtrain
// and ./memtrain the binary just built. The convention, stated in the README:
//
//   - only blocks fenced as ```sh or ```bash run; ```text, ```console and
//     unlabelled blocks are illustrations;
//   - a block with a line "# not run" (optionally followed by a reason) is an
//     illustration too (MPI, a GPU);
//   - `git clone`, `go test ./...` and `go build ... ./cmd/memtrain` lines are
//     skipped (the test is the clone, the tests, and has built the binary),
//     and `go run ./cmd/memtrain` is the binary;
//   - `memtrain demo` runs as `memtrain demo --quick` (so a study started from
//     `demo --print-spec` is the quick study; the README names models by their
//     run folder, so no step number depends on which study ran);
//   - `memtrain download REPO` runs against a loopback stand-in of the Hugging
//     Face Hub (hubtest, $HF_ENDPOINT) that serves a tiny random checkpoint as
//     each REPO the README downloads, into a cache of the test's own
//     ($HF_HUB_CACHE): nothing leaves the machine.
//
// The blocks take several minutes on 2 cores (the demo and a study, both in
// their quick form), so the test runs only with MEMTRAIN_README_TEST=1, which
// .ci/run sets. A failure names the README line and the command.
func TestREADMERuns(t *testing.T) {
	if os.Getenv("MEMTRAIN_README_TEST") != "1" {
		t.Skip("set MEMTRAIN_README_TEST=1 to run the README's shell blocks (.ci/run does)")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := findModuleRoot(t, wd)
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))
	if len(blocks) == 0 {
		t.Fatal("README.md: no ```sh blocks")
	}

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	work := filepath.Join(tmp, "clone")
	for _, d := range []string{bin, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(bin, "memtrain")
	build := exec.Command("go", "build", "-o", exe, "./cmd/memtrain")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s ./cmd/memtrain: %v\n%s", exe, err, out)
	}
	if err := os.Symlink(exe, filepath.Join(work, "memtrain")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "data"), filepath.Join(work, "data")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	env = append(env, readmeHub(t, blocks, exe, tmp)...)

	// Each command runs in the folder the one before it left (a cd
	// holds, as in one shell), read back through pwd.
	dir, pwd := work, filepath.Join(tmp, "pwd")
	for _, b := range blocks {
		for _, c := range b.commands {
			if m := readmeGoBuild.FindStringSubmatch(c.text); m != nil && m[1] != "" {
				// The binary the README builds is the test's, where
				// the README puts it.
				if err := os.Symlink(exe, filepath.Join(dir, m[1])); err != nil && !os.IsExist(err) {
					t.Fatal(err)
				}
			}
			line := readmeRewrite(c.text)
			if line == "" {
				continue
			}
			start := time.Now()
			cmd := exec.Command("bash", "-e", "-c", line+"\npwd >"+pwd)
			cmd.Dir = dir
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			t.Logf("README.md:%d (%s, in %s): %s", c.line, time.Since(start).Round(time.Millisecond), dir, line)
			if err != nil {
				t.Fatalf("README.md:%d: %s\n(ran as: %s)\n%v\n%s", c.line, c.text, line, err, tail(string(out), 4000))
			}
			b, err := os.ReadFile(pwd)
			if err != nil {
				t.Fatal(err)
			}
			if dir = strings.TrimSpace(string(b)); !strings.HasPrefix(dir, work) {
				t.Fatalf("README.md:%d: %s leaves the clone for %s", c.line, c.text, dir)
			}
		}
	}
	// The walkthrough writes nothing into the clone's own folders: only
	// what the test put there and the folders git ignores.
	entries, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "memtrain", "data", "walkthrough", "memtrain-demo", "memtrain-demo-quick":
		default:
			t.Errorf("the README's commands wrote %s into the clone's root", e.Name())
		}
	}
}

type readmeCommand struct {
	line int    // README line of the command's first line
	text string // the command, continuation lines joined
}

type readmeBlock struct {
	line     int
	commands []readmeCommand
}

// readmeDownload matches a README download, its repo in the first group.
var readmeDownload = regexp.MustCompile(`\bmemtrain download (\S+)`)

// readmeHub starts a stand-in Hub serving, as each repo the README's
// blocks download, a tiny checkpoint that exe makes, and returns the
// environment that points memtrain at it and at a cache under tmp.
func readmeHub(t *testing.T, blocks []readmeBlock, exe, tmp string) []string {
	t.Helper()
	model := filepath.Join(tmp, "hub-model")
	if out, err := exec.Command(exe, "init", "--out", model, "--tokenizer", "builtin:llama2", "--preset", "tiny", "--seed", "2").CombinedOutput(); err != nil {
		t.Fatalf("memtrain init: %v\n%s", err, out)
	}
	files := hubtest.Folder(t, model)
	var repos []hubtest.Repo
	for _, b := range blocks {
		for _, c := range b.commands {
			if m := readmeDownload.FindStringSubmatch(c.text); m != nil {
				const commit = "5a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
				repos = append(repos, hubtest.Repo{ID: m[1], Commits: map[string][]hubtest.File{commit: files}, Refs: map[string]string{"main": commit}})
			}
		}
	}
	srv := hubtest.New(t, repos...)
	return []string{"HF_ENDPOINT=" + srv.URL(), "HF_HUB_CACHE=" + filepath.Join(tmp, "hf-cache"), "HF_HOME=" + filepath.Join(tmp, "hf-home"),
		"HF_TOKEN=", "HF_TOKEN_PATH="}
}

// readmeBlocks returns the README's ```sh and ```bash blocks that carry no
// "# not run" line, each split into commands (a trailing backslash continues).
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	skip := false
	var pending *readmeCommand
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		s := sc.Text()
		trimmed := strings.TrimSpace(s)
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") {
				lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
				cur = &readmeBlock{line: n}
				skip = lang != "sh" && lang != "bash"
			}
			continue
		}
		if trimmed == "```" {
			if pending != nil {
				cur.commands = append(cur.commands, *pending)
				pending = nil
			}
			if !skip {
				blocks = append(blocks, *cur)
			}
			cur = nil
			continue
		}
		if strings.HasPrefix(trimmed, "# not run") {
			skip = true
		}
		if pending == nil {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			pending = &readmeCommand{line: n}
		}
		if strings.HasSuffix(s, `\`) {
			pending.text += strings.TrimSuffix(s, `\`) + " "
			continue
		}
		pending.text += s
		pending.text = strings.Join(strings.Fields(pending.text), " ")
		cur.commands = append(cur.commands, *pending)
		pending = nil
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a code block is not closed", cur.line)
	}
	return blocks
}

var (
	// readmeGoBuild matches the README's build of the binary, its -o
	// output in the first group when it comes first.
	readmeGoBuild = regexp.MustCompile(`^go build(?: -o (\S+))?(?: -[a-z]+ \S+)* (?:\.\./|\./)cmd/memtrain\b.*$`)
	readmeGoRun   = regexp.MustCompile(`\bgo run \./cmd/memtrain\b`)
	readmeDemo    = regexp.MustCompile(`\bmemtrain demo\b`)
)

// readmeRewrite applies the convention's rewrites to one command; "" skips it.
func readmeRewrite(s string) string {
	switch {
	case strings.HasPrefix(s, "git clone "), strings.HasPrefix(s, "go test "), readmeGoBuild.MatchString(s):
		return ""
	}
	s = readmeGoRun.ReplaceAllString(s, "memtrain")
	if !strings.Contains(s, "--quick") {
		s = readmeDemo.ReplaceAllString(s, "memtrain demo --quick")
	}
	return s
}

// findModuleRoot walks up from dir to the folder holding go.mod.
func findModuleRoot(t *testing.T, dir string) string {
	t.Helper()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod at or above %s", dir)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestREADMEBlocks checks, without running anything, the convention
// TestREADMERuns applies: the README has sh blocks to run, each run command
// is the binary (or a shell helper), the demo runs --quick, and the
// illustrations (mpirun, go test ./...) are left out.
func TestREADMEBlocks(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, filepath.Join(findModuleRoot(t, wd), "README.md"))
	var ran []string
	for _, b := range blocks {
		for _, c := range b.commands {
			line := readmeRewrite(c.text)
			if line == "" {
				continue
			}
			ran = append(ran, line)
			for _, bad := range []string{"mpirun", "go test", "go run", "git clone", "-tags mpi"} {
				if strings.Contains(line, bad) {
					t.Errorf("README.md:%d: %q would run %q", c.line, c.text, bad)
				}
			}
			if readmeDemo.MatchString(line) && !strings.Contains(line, "--quick") {
				t.Errorf("README.md:%d: the demo would run in full: %s", c.line, line)
			}
		}
	}
	all := strings.Join(ran, "\n")
	for _, want := range []string{"memtrain demo --quick", "./memtrain finetune ", "./memtrain experiment run ", "./memtrain download "} {
		if !strings.Contains(all, want) {
			t.Errorf("no README command runs %q; ran:\n%s", want, all)
		}
	}
}
