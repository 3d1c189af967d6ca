// Package stopsignal turns the signals that end a job — Ctrl-C, a
// scheduler's SIGTERM, SIGUSR1 ahead of time (Slurm's --signal, which
// Open MPI passes through) — into a request to stop at the next step with
// a checkpoint; a second signal ends the process at once (an atomic
// commit keeps the previous checkpoint intact).
package stopsignal

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// A Watch is the signals watched while a job runs.
type Watch struct {
	mu  sync.Mutex
	sig os.Signal // the first signal, nil until one came
	ch  chan os.Signal
}

// Start watches the stop signals, writing a line to w for each. A second
// signal exits the process with the first one's status (Exit).
func Start(w io.Writer) *Watch {
	s := &Watch{ch: make(chan os.Signal, 2)}
	signal.Notify(s.ch, stopSignals...)
	go func() {
		for sig := range s.ch {
			s.mu.Lock()
			first := s.sig
			if first == nil {
				s.sig = sig
			}
			s.mu.Unlock()
			if first != nil {
				fmt.Fprintf(w, "memtrain: %v again: stopping now, without a checkpoint of this step\n", sig)
				os.Exit(Exit(first))
			}
			fmt.Fprintf(w, "memtrain: %v: finishing this step and saving a checkpoint (send it again to stop at once)\n", sig)
		}
	}()
	return s
}

// Stop stops watching.
func (s *Watch) Stop() {
	signal.Stop(s.ch)
	close(s.ch)
}

// Requested says whether a signal asked the job to stop.
func (s *Watch) Requested() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig != nil
}

// Signal is the first signal, or nil.
func (s *Watch) Signal() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig
}

// Exit is the shell's exit status of a process ended by sig: 128 + its
// number (SIGINT 130, SIGTERM 143, SIGUSR1 138).
func Exit(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}
