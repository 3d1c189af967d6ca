//go:build !linux

package sysmem

// hostRoot is empty where there is no /proc to read: the host's memory is
// unknown.
const hostRoot = ""
