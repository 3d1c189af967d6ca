//go:build !unix

package finetune

import "os"

// flock is a no-op where advisory locks are not available: the note
// beside the lock still names the process that wrote it.
func flock(*os.File) (held bool, err error) { return false, nil }
