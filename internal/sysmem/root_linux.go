package sysmem

// hostRoot is where the host's files are read: Linux has /proc and
// /sys/fs/cgroup.
const hostRoot = "/"
