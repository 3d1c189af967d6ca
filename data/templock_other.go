//go:build !unix

package data

import (
	"errors"
	"os"
)

// errNoLocks says that advisory locks cannot be taken here: a writer
// works without one, and no temporary folder is taken for stale.
var errNoLocks = errors.New("data: no advisory locks on this system")

func tryLock(*os.File) (held bool, err error) { return false, errNoLocks }
