//go:build !unix

package stopsignal

import "os"

var stopSignals = []os.Signal{os.Interrupt}
