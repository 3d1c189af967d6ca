// Package sysmem reads how much memory this process can still allocate
// on the host, for the checks that refuse a computation before it
// allocates more than the machine has: the kernel's estimate of what can
// be allocated without swapping (/proc/meminfo's MemAvailable), capped by
// the room left under the process's cgroup limit (cgroup v2: memory.max −
// memory.current; v1: memory.limit_in_bytes − memory.usage_in_bytes; in
// both, the reclaimable inactive page cache of memory.stat counts as
// room, as the kernel reclaims it before it kills anything), over the
// process's cgroup and the cgroups above it. Off Linux, or when none of
// it can be read, the amount is unknown and callers skip their check.
//
// The package imports nothing of memtrain.
package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available is what the host has left for this process.
type Available struct {
	Bytes int64
	// Source names the reading that bounds Bytes: "MemAvailable", or the
	// cgroup file and folder, e.g. "cgroup memory.max of /sys/fs/cgroup".
	Source string
}

// Host returns what the host has left for this process; false when it
// cannot be known (off Linux, no /proc).
func Host() (Available, bool) { return host(hostRoot) }

// v1Unlimited: cgroup v1 writes "no limit" as the largest page-aligned
// int64, 9223372036854771712; anything from 2^62 up is no limit.
const v1Unlimited = 1 << 62

// host reads the files under root ("/" on Linux; a fake tree in tests).
func host(root string) (Available, bool) {
	if root == "" {
		return Available{}, false
	}
	var best Available
	found := false
	take := func(a Available) {
		if !found || a.Bytes < best.Bytes {
			best, found = a, true
		}
	}
	if kb, ok := meminfo(filepath.Join(root, "proc", "meminfo"), "MemAvailable"); ok {
		take(Available{kb * 1024, "MemAvailable"})
	}
	v1, v2 := cgroupPaths(filepath.Join(root, "proc", "self", "cgroup"))
	cg := filepath.Join(root, "sys", "fs", "cgroup")
	// cgroup v2: mounted at /sys/fs/cgroup, or at unified/ beside v1's
	// controllers (hybrid).
	for _, mount := range []string{cg, filepath.Join(cg, "unified")} {
		if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err != nil {
			continue
		}
		for _, dir := range chain(mount, v2) {
			if a, ok := room(dir, "memory.max", "memory.current", "inactive_file"); ok {
				take(a)
			}
		}
		break
	}
	if v1 != "" || fileExists(filepath.Join(cg, "memory", "memory.limit_in_bytes")) {
		for _, dir := range chain(filepath.Join(cg, "memory"), v1) {
			if a, ok := room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"); ok {
				take(a)
			}
		}
	}
	return best, found
}

// chain lists the cgroup folders from the process's own (path under
// mount) up to mount itself. A container that sees its own cgroup as the
// mount's root (a cgroup namespace, or a bind mount) has a path that is
// not there: then the mount alone.
func chain(mount, path string) []string {
	dir := filepath.Join(mount, filepath.FromSlash(path))
	if path == "" || !fileExists(dir) {
		return []string{mount}
	}
	var out []string
	for {
		out = append(out, dir)
		if dir == mount || len(dir) <= len(mount) {
			return out
		}
		dir = filepath.Dir(dir)
	}
}

// room is what a cgroup folder's limit leaves: limit − (usage − the
// inactive page cache); false without a limit.
func room(dir, limitFile, usageFile, inactiveKey string) (Available, bool) {
	limit, ok := readInt(filepath.Join(dir, limitFile))
	if !ok || limit >= v1Unlimited {
		return Available{}, false // "max", absent, or v1's no-limit value
	}
	usage, ok := readInt(filepath.Join(dir, usageFile))
	if !ok {
		return Available{}, false
	}
	if inactive, ok := statValue(filepath.Join(dir, "memory.stat"), inactiveKey); ok && inactive <= usage {
		usage -= inactive
	}
	return Available{max(limit-usage, 0), "cgroup " + limitFile + " of " + dir}, true
}

// cgroupPaths reads /proc/self/cgroup: the v1 memory controller's path
// ("4:memory:/a/b") and the v2 path ("0::/a/b").
func cgroupPaths(file string) (v1, v2 string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v1, v2
}

// meminfo reads a field of /proc/meminfo, in kB.
func meminfo(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), key+":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		return n, err == nil && n >= 0
	}
	return 0, false
}

// statValue reads a "key value" line of a cgroup's memory.stat.
func statValue(file, key string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == key {
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// readInt reads a file holding one integer; false for "max" or anything
// else.
func readInt(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n >= 0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
