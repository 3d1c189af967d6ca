package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LibDirEnv names the environment variable whose folders (a list, like
// $PATH) are searched first for the CUDA libraries.
const LibDirEnv = "MEMTRAIN_CUDA_LIB_DIR"

// A library is one of the shared libraries the backend loads at run time.
type library struct {
	// name is the library's usual soname, which messages and the record
	// of loaded paths use.
	name string
	// stem is its unversioned file name. In each folder searched, the
	// versioned files stem.N[.M…] are tried newest first — a folder that
	// holds cuBLAS 12 and 13 (a CUDA 13 wheel beside an older toolkit's
	// link) gives 13 — and then stem itself, the development link.
	stem string
	// companions are glob patterns of libraries, in the folder where the
	// library was found, to load before it: cuBLAS needs cuBLASLt, and
	// NVRTC opens its builtins library by name at run time. Loading them
	// first from the same folder makes those lookups find the right copy
	// whatever the loader's own search path holds.
	companions []string
}

var (
	libCUDA   = library{name: "libcuda.so.1", stem: "libcuda.so"}
	libCUBLAS = library{name: "libcublas.so", stem: "libcublas.so", companions: []string{"libcublasLt.so.*"}}
	libNVRTC  = library{name: "libnvrtc.so", stem: "libnvrtc.so", companions: []string{"libnvrtc-builtins.so.*"}}
	libNCCL   = library{name: "libnccl.so.2", stem: "libnccl.so"}
)

// candidates lists lib's files in folder d, newest version first, then the
// unversioned stem. A suffix that is not a dotted version (libcuda.so.bak)
// is not a candidate.
func (lib library) candidates(d string, env searchEnv) []string {
	m, _ := env.glob(filepath.Join(d, lib.stem+".*"))
	type versioned struct {
		path string
		v    []int
	}
	var vs []versioned
	for _, p := range m {
		if v, ok := parseVersion(strings.TrimPrefix(filepath.Base(p), lib.stem+".")); ok && env.exists(p) {
			vs = append(vs, versioned{p, v})
		}
	}
	sort.SliceStable(vs, func(i, j int) bool { return compareVersions(vs[i].v, vs[j].v) > 0 })
	out := make([]string, 0, len(vs)+1)
	for _, x := range vs {
		out = append(out, x.path)
	}
	if p := filepath.Join(d, lib.stem); env.exists(p) {
		out = append(out, p)
	}
	return out
}

// parseVersion reads "13", "12.8.4": dot-separated decimal numbers.
func parseVersion(s string) ([]int, bool) {
	var v []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || f == "" || f[0] == '+' {
			return nil, false
		}
		v = append(v, n)
	}
	return v, len(v) > 0
}

// compareVersions orders versions component by component; a longer
// version after an equal prefix is newer (13.0.88 after 13).
func compareVersions(a, b []int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// A searchPlace is a group of folders searched together, with the label
// that names it in error messages.
type searchPlace struct {
	label string
	dirs  []string
}

// searchEnv is what the search reads from the process's surroundings, so
// that tests can replace it.
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
	exists func(string) bool // a regular file (or a link to one) is there
	// python returns the site-packages folders python3 reports, or nil
	// when there is no python3.
	python func() []string
	goarch string
	// loaderDefault lets the dynamic loader try the bare names last, on
	// its own default path; tests turn it off.
	loaderDefault bool
	// only, when set, replaces every search place.
	only []searchPlace
}

// systemEnv is the real process environment.
func systemEnv() searchEnv {
	return searchEnv{getenv: os.Getenv, glob: filepath.Glob, exists: fileExists, python: pythonSitePackages,
		goarch: runtime.GOARCH, loaderDefault: true}
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// searchPlaces lists where the libraries are looked for, in order:
// $MEMTRAIN_CUDA_LIB_DIR, $LD_LIBRARY_PATH, $CUDA_HOME and $CUDA_PATH,
// the system folders where drivers and toolkits install them, and the
// nvidia/*/lib folders of pip-installed NVIDIA packages (which PyTorch
// brings along) in every Python environment found. The Python places come
// last and are computed only when reached, since asking python3 for its
// site-packages runs a process.
func searchPlaces(env searchEnv) (first []searchPlace, python func() searchPlace) {
	if env.only != nil {
		return env.only, nil
	}
	list := func(v string) []string {
		var dirs []string
		for _, d := range filepath.SplitList(v) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		return dirs
	}
	envPlace := func(name string) searchPlace {
		v := env.getenv(name)
		if v == "" {
			return searchPlace{label: "$" + name + " (unset)"}
		}
		return searchPlace{label: "$" + name + " (" + v + ")", dirs: list(v)}
	}
	first = append(first, envPlace(LibDirEnv), envPlace("LD_LIBRARY_PATH"))
	for _, name := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := env.getenv(name); v != "" {
			first = append(first, searchPlace{label: "$" + name + "/lib64", dirs: []string{filepath.Join(v, "lib64")}})
		}
	}
	triple, target := "x86_64-linux-gnu", "x86_64-linux"
	if env.goarch == "arm64" {
		triple, target = "aarch64-linux-gnu", "sbsa-linux"
	}
	for _, d := range []string{
		"/usr/lib/" + triple,
		"/lib/" + triple,
		"/usr/lib64",
		// Where the NVIDIA container toolkit mounts the driver's
		// libraries.
		"/usr/local/nvidia/lib64",
		"/usr/local/nvidia/lib",
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/" + target + "/lib",
		"/usr/lib/wsl/lib",
		"/usr/local/lib",
		"/usr/lib",
	} {
		first = append(first, searchPlace{label: d, dirs: []string{d}})
	}
	python = func() searchPlace {
		dirs := pipLibDirs(env)
		label := "pip nvidia/*/lib folders (none found)"
		if len(dirs) > 0 {
			label = "pip nvidia/*/lib folders (" + strings.Join(dirs, ":") + ")"
		}
		return searchPlace{label: label, dirs: dirs}
	}
	return first, python
}

// pipLibDirs returns the nvidia/*/lib folders of the site-packages folders
// of every Python environment it can find: the active virtual environment
// or conda environment, the user's and the system's, and whatever python3
// itself reports.
func pipLibDirs(env searchEnv) []string {
	var sites []string
	add := func(pattern string) {
		m, _ := env.glob(pattern)
		sort.Strings(m)
		sites = append(sites, m...)
	}
	for _, prefix := range []string{env.getenv("VIRTUAL_ENV"), env.getenv("CONDA_PREFIX")} {
		if prefix != "" {
			add(filepath.Join(prefix, "lib", "python3*", "site-packages"))
		}
	}
	if home := env.getenv("HOME"); home != "" {
		add(filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	for _, p := range []string{
		"/usr/local/lib/python3*/dist-packages",
		"/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages",
		"/usr/lib/python3*/site-packages",
		"/opt/conda/lib/python3*/site-packages",
	} {
		add(p)
	}
	if env.python != nil {
		sites = append(sites, env.python()...)
	}
	var dirs []string
	seen := map[string]bool{}
	for _, s := range sites {
		m, _ := env.glob(filepath.Join(s, "nvidia", "*", "lib"))
		sort.Strings(m)
		for _, d := range m {
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// pythonSitePackages asks python3, if there is one on $PATH, for its
// site-packages folders. A python3 that hangs is given five seconds.
func pythonSitePackages() []string {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c",
		"import site\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// findLibrary lists the files that could be lib, in search order: for
// each place, each folder, its versions of lib newest first. Python
// places are searched only when nothing was found before them. It also
// returns the places searched, for the error message.
func findLibrary(lib library, env searchEnv) (found []string, places []searchPlace) {
	first, python := searchPlaces(env)
	look := func(p searchPlace) {
		for _, d := range p.dirs {
			found = append(found, lib.candidates(d, env)...)
		}
	}
	for _, p := range first {
		look(p)
		places = append(places, p)
	}
	if len(found) == 0 && python != nil {
		p := python()
		look(p)
		places = append(places, p)
	}
	return found, places
}

// errLibrary is the one-line error of a library that did not load.
type errLibrary struct {
	name   string        // the preferred name, e.g. "libcuda.so.1"
	places []searchPlace // where it was looked for
	tries  []string      // "path: why" for each file that failed to load
	// loaderDefault says that the dynamic loader's own path was tried too.
	loaderDefault bool
}

func (e *errLibrary) Error() string {
	var b strings.Builder
	if len(e.tries) == 0 {
		fmt.Fprintf(&b, "cuda: %s not found", e.name)
	} else {
		fmt.Fprintf(&b, "cuda: %s did not load: %s", e.name, strings.Join(e.tries, "; "))
	}
	labels := make([]string, 0, len(e.places)+1)
	for _, p := range e.places {
		labels = append(labels, p.label)
	}
	if e.loaderDefault {
		labels = append(labels, "the dynamic loader's default path")
	}
	fmt.Fprintf(&b, " (looked in: %s)", strings.Join(labels, ", "))
	return b.String()
}

// ErrNoCUDA is matched, with errors.Is, by the error New returns when the
// CUDA libraries or a GPU are missing: the condition a caller may want to
// fall back on rather than report.
var ErrNoCUDA = errors.New("cuda: unavailable")

func (e *errLibrary) Is(target error) bool { return target == ErrNoCUDA }

// loadLibrary opens lib: the first file findLibrary lists that loads (with
// its companions from the same folder), else whatever the dynamic loader
// finds under lib's names on its own default path (ld.so.cache).
func loadLibrary(lib library, env searchEnv) (handle uintptr, path string, err error) {
	found, places := findLibrary(lib, env)
	e := &errLibrary{name: lib.name, places: places, loaderDefault: env.loaderDefault}
	for _, p := range found {
		for _, pattern := range lib.companions {
			m, _ := env.glob(filepath.Join(filepath.Dir(p), pattern))
			sort.Strings(m)
			for _, c := range m {
				// A companion that fails to load is not an error
				// yet: the library itself may still find one.
				dlopen(c)
			}
		}
		h, err := dlopen(p)
		if err == nil {
			return h, p, nil
		}
		e.tries = append(e.tries, p+": "+oneLine(err.Error()))
	}
	if env.loaderDefault {
		for _, name := range []string{lib.name, lib.stem} {
			if h, err := dlopen(name); err == nil {
				return h, name, nil
			}
		}
	}
	return 0, "", e
}

// oneLine folds a message onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
