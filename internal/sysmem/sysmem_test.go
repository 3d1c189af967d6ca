package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// tree writes files (path → content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo24G = "MemTotal:       32000000 kB\nMemFree:        1000000 kB\nMemAvailable:   25165824 kB\n"

func TestHost(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		files  map[string]string
		bytes  int64
		source string // a prefix of Available.Source; "": unknown
	}{
		{"nothing to read", map[string]string{}, 0, ""},
		{"meminfo alone", map[string]string{"proc/meminfo": meminfo24G}, 24 * gib, "MemAvailable"},
		{"v2 limit below MemAvailable", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/cgroup.controllers": "memory\n", "sys/fs/cgroup/memory.max": "17179869184\n",
			"sys/fs/cgroup/memory.current": "4294967296\n", "sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 1073741824\n",
		}, 16*gib - 3*gib, "cgroup memory.max of "},
		{"v2 unlimited", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/cgroup.controllers": "", "sys/fs/cgroup/memory.max": "max\n", "sys/fs/cgroup/memory.current": "1\n",
		}, 24 * gib, "MemAvailable"},
		{"v2 the tighter of a cgroup and its parent", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "0::/job/step\n",
			"sys/fs/cgroup/cgroup.controllers": "",
			"sys/fs/cgroup/job/memory.max":     "8589934592\n", "sys/fs/cgroup/job/memory.current": "2147483648\n",
			"sys/fs/cgroup/job/step/memory.max": "max\n", "sys/fs/cgroup/job/step/memory.current": "1073741824\n",
		}, 6 * gib, "cgroup memory.max of "},
		{"v1 limit", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "4:memory:/docker/abc\n0::/\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "4294967296\n",
			"sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "1073741824\n",
			"sys/fs/cgroup/memory/docker/abc/memory.stat":           "cache 5\ntotal_inactive_file 0\n",
		}, 3 * gib, "cgroup memory.limit_in_bytes of "},
		{"v1 unlimited, in a namespace that hides the path", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "4:memory:/process_api/d211\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "1259675648\n",
		}, 24 * gib, "MemAvailable"},
		{"v1 limit at the namespace's root", map[string]string{
			"proc/meminfo": meminfo24G, "proc/self/cgroup": "4:memory:/process_api/d211\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648\n",
			"sys/fs/cgroup/memory/memory.usage_in_bytes": "1073741824\n",
		}, 1 * gib, "cgroup memory.limit_in_bytes of "},
		{"over the limit leaves nothing", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cgroup.controllers": "",
			"sys/fs/cgroup/memory.max": "100\n", "sys/fs/cgroup/memory.current": "200\n",
		}, 0, "cgroup memory.max of "},
		{"unreadable meminfo", map[string]string{"proc/meminfo": "MemAvailable: lots\n"}, 0, ""},
	}
	for _, tt := range tests {
		a, ok := host(tree(t, tt.files))
		if ok != (tt.source != "") || a.Bytes != tt.bytes || !strings.HasPrefix(a.Source, tt.source) {
			t.Errorf("%s: %+v, %v; want %d bytes from %q", tt.name, a, ok, tt.bytes, tt.source)
		}
	}
}

// TestHostHere: on Linux this machine's memory is known and positive;
// elsewhere it is unknown.
func TestHostHere(t *testing.T) {
	a, ok := Host()
	if runtime.GOOS != "linux" {
		if ok {
			t.Errorf("%s: %+v, want unknown", runtime.GOOS, a)
		}
		return
	}
	if !ok || a.Bytes <= 0 || a.Source == "" {
		t.Errorf("Host() = %+v, %v", a, ok)
	}
}
