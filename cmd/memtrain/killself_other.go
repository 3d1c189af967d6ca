//go:build !unix

package main

import "os"

// killSelf ends the process at once, without deferred functions.
func killSelf() { os.Exit(137) }
