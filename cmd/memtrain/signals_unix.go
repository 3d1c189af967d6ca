//go:build unix

package main

import (
	"os"
	"syscall"
)

var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1}
