//go:build !unix

package main

import "os"

var stopSignals = []os.Signal{os.Interrupt}
