package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rootedEnv is a search environment that sees the file system under root:
// "/usr/lib64/x" means root+"/usr/lib64/x". Paths come back without root.
func rootedEnv(root string, vars map[string]string, python []string) searchEnv {
	return searchEnv{
		getenv: func(k string) string { return vars[k] },
		glob: func(pattern string) ([]string, error) {
			m, err := filepath.Glob(root + pattern)
			for i := range m {
				m[i] = strings.TrimPrefix(m[i], root)
			}
			return m, err
		},
		exists: func(p string) bool { return fileExists(root + p) },
		python: func() []string { return python },
		goarch: "amd64",
	}
}

// touch makes empty files (and their folders) under root.
func touch(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("not a library"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindLibraryOrder(t *testing.T) {
	root := t.TempDir()
	touch(t, root,
		"/opt/mine/libcublas.so",
		"/opt/ld/libcublas.so.12",
		"/usr/local/cuda/lib64/libcublas.so.12",
		"/usr/local/cuda/lib64/libcublas.so", // a dev link: after the versioned name in its folder
		"/usr/lib/x86_64-linux-gnu/libcublas.so.11",
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
	)
	vars := map[string]string{LibDirEnv: "/opt/mine", "LD_LIBRARY_PATH": "/nowhere:/opt/ld", "HOME": "/home/u"}
	found, places := findLibrary(libCUBLAS, rootedEnv(root, vars, nil))
	want := []string{
		"/opt/mine/libcublas.so",
		"/opt/ld/libcublas.so.12",
		"/usr/lib/x86_64-linux-gnu/libcublas.so.11",
		"/usr/local/cuda/lib64/libcublas.so.12",
		"/usr/local/cuda/lib64/libcublas.so",
	}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("found\n%q\nwant\n%q", found, want)
	}
	// Python's folders are searched only when nothing was found before.
	for _, p := range places {
		if strings.HasPrefix(p.label, "pip") {
			t.Errorf("searched %s although earlier places had the library", p.label)
		}
	}

	// Only in a pip wheel: found there, through $HOME's site-packages and
	// through the folders python3 reports (listed once).
	root = t.TempDir()
	touch(t, root,
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/srv/py/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
	)
	vars = map[string]string{"HOME": "/home/u", "VIRTUAL_ENV": "/venv"}
	found, places = findLibrary(libNVRTC, rootedEnv(root, vars, []string{"/srv/py/site-packages", "/venv/lib/python3.12/site-packages"}))
	want = []string{
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/home/u/.local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/srv/py/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
	}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("found\n%q\nwant\n%q", found, want)
	}
	if last := places[len(places)-1].label; !strings.HasPrefix(last, "pip nvidia/*/lib folders (/venv/") {
		t.Errorf("last place %q", last)
	}
}

// In one folder the newest version comes first, whatever the names'
// order as text (13 before 12, 12.10 before 12.9), then the development
// link; a suffix that is no version is no candidate.
func TestFindLibraryNewestFirst(t *testing.T) {
	root := t.TempDir()
	touch(t, root,
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/local/nvidia/lib64/libcuda.so.580.65.06",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
		"/opt/cuda/libcublas.so",
		"/opt/cuda/libcublas.so.12",
		"/opt/cuda/libcublas.so.12.9.1",
		"/opt/cuda/libcublas.so.12.10",
		"/opt/cuda/libcublas.so.13",
		"/opt/cuda/libcublas.so.bak",
		"/opt/cuda/libcublas.so.13.x",
	)
	env := rootedEnv(root, map[string]string{LibDirEnv: "/opt/cuda", "VIRTUAL_ENV": "/venv"}, nil)
	found, _ := findLibrary(libCUBLAS, env)
	want := []string{"/opt/cuda/libcublas.so.13", "/opt/cuda/libcublas.so.12.10", "/opt/cuda/libcublas.so.12.9.1",
		"/opt/cuda/libcublas.so.12", "/opt/cuda/libcublas.so"}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("found\n%q\nwant\n%q", found, want)
	}
	// The container toolkit's driver folder; the pip wheel's CUDA 13
	// folder when nothing comes before it.
	found, _ = findLibrary(libCUDA, env)
	if want := []string{"/usr/local/nvidia/lib64/libcuda.so.580.65.06", "/usr/local/nvidia/lib64/libcuda.so.1"}; !reflect.DeepEqual(found, want) {
		t.Errorf("libcuda: found %q, want %q", found, want)
	}
	env = rootedEnv(root, map[string]string{"VIRTUAL_ENV": "/venv"}, nil)
	found, _ = findLibrary(libCUBLAS, env)
	if want := []string{"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13"}; !reflect.DeepEqual(found, want) {
		t.Errorf("pip: found %q, want %q", found, want)
	}
}

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"13", []int{13}}, {"12.8.4", []int{12, 8, 4}}, {"1", []int{1}},
		{"", nil}, {"bak", nil}, {"13.", nil}, {".13", nil}, {"13.x", nil}, {"+1", nil}, {"-1", nil}, {"1..2", nil},
	} {
		got, ok := parseVersion(c.in)
		if ok != (c.want != nil) || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseVersion(%q) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}

func TestSearchPlacesOrder(t *testing.T) {
	vars := map[string]string{"LD_LIBRARY_PATH": "/a:/b", "CUDA_HOME": "/cuda"}
	first, python := searchPlaces(rootedEnv(t.TempDir(), vars, nil))
	var labels []string
	for _, p := range first {
		labels = append(labels, p.label)
	}
	labels = append(labels, python().label)
	want := []string{
		"$MEMTRAIN_CUDA_LIB_DIR (unset)",
		"$LD_LIBRARY_PATH (/a:/b)",
		"$CUDA_HOME/lib64",
		"/usr/lib/x86_64-linux-gnu",
		"/lib/x86_64-linux-gnu",
		"/usr/lib64",
		"/usr/local/nvidia/lib64",
		"/usr/local/nvidia/lib",
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/lib/wsl/lib",
		"/usr/local/lib",
		"/usr/lib",
		"pip nvidia/*/lib folders (none found)",
	}
	if !reflect.DeepEqual(labels, want) {
		t.Errorf("places\n%q\nwant\n%q", labels, want)
	}
	env := rootedEnv(t.TempDir(), nil, nil)
	env.goarch = "arm64"
	first, _ = searchPlaces(env)
	if first[2].label != "/usr/lib/aarch64-linux-gnu" || first[8].label != "/usr/local/cuda/targets/sbsa-linux/lib" {
		t.Errorf("arm64 places start %q … %q", first[2].label, first[8].label)
	}
}

func TestLoadLibraryNotFound(t *testing.T) {
	env := rootedEnv(t.TempDir(), map[string]string{LibDirEnv: "/x"}, nil)
	env.loaderDefault = true
	_, _, err := loadLibrary(library{name: "libmemtrain-nonexistent.so.1", stem: "libmemtrain-nonexistent.so"}, env)
	if err == nil {
		t.Fatal("loaded a library that does not exist")
	}
	msg := err.Error()
	want := "cuda: libmemtrain-nonexistent.so.1 not found (looked in: $MEMTRAIN_CUDA_LIB_DIR (/x), $LD_LIBRARY_PATH (unset), /usr/lib/x86_64-linux-gnu, "
	if !strings.HasPrefix(msg, want) {
		t.Errorf("error\n%s\nwant prefix\n%s", msg, want)
	}
	if !strings.HasSuffix(msg, ", /usr/lib, pip nvidia/*/lib folders (none found), the dynamic loader's default path)") {
		t.Errorf("error %q does not end with the pip folders and the loader", msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if !errors.Is(err, ErrNoCUDA) {
		t.Errorf("error does not match ErrNoCUDA")
	}
}

// A file that is there but is no library: the error names it and says
// why the loader refused it, and the next candidate is tried.
func TestLoadLibraryBadFile(t *testing.T) {
	if !canLoad {
		t.Skip("this build cannot load libraries")
	}
	dir1, dir2 := t.TempDir(), t.TempDir()
	touch(t, dir1, "libcuda.so.1")
	touch(t, dir2, "libcuda.so")
	env := searchEnv{
		getenv: func(k string) string {
			if k == LibDirEnv {
				return dir1 + string(os.PathListSeparator) + dir2
			}
			return ""
		},
		glob: filepath.Glob, exists: fileExists, goarch: "amd64",
	}
	_, _, err := loadLibrary(libCUDA, env)
	if err == nil {
		t.Fatal("loaded a text file as a library")
	}
	msg := err.Error()
	p1, p2 := filepath.Join(dir1, "libcuda.so.1"), filepath.Join(dir2, "libcuda.so")
	if !strings.HasPrefix(msg, "cuda: libcuda.so.1 did not load: "+p1+": ") || !strings.Contains(msg, "; "+p2+": ") {
		t.Errorf("error %q does not name both files in order", msg)
	}
	if strings.Contains(msg, "dynamic loader") || strings.Contains(msg, "\n") {
		t.Errorf("error %q", msg)
	}
}

// New without the libraries fails with one line.
func TestNewWithoutCUDA(t *testing.T) {
	_, err := New(Options{LibDir: t.TempDir()})
	if err == nil {
		t.Fatal("New succeeded on an empty library folder")
	}
	if !errors.Is(err, ErrNoCUDA) || !strings.HasPrefix(err.Error(), "cuda: libcuda.so.1 not found (looked in: ") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q", err)
	}
	if _, err := New(Options{GEMM: "fp8"}); err == nil || !strings.Contains(err.Error(), `"fp8"`) {
		t.Errorf("bad GEMM precision: %v", err)
	}
}
