//go:build unix

package stopsignal

import (
	"os"
	"syscall"
)

var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1}
