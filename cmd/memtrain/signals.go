package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// A stopper turns the signals a scheduler sends before it ends a job
// (SIGTERM; SIGUSR1 ahead of time, which Slurm's --signal and Open MPI
// pass through) and Ctrl-C into a request to stop at the next step with a
// checkpoint. A second signal ends the process at once: the atomic commit
// keeps the previous checkpoint intact.
type stopper struct {
	mu  sync.Mutex
	sig os.Signal // the first signal, nil until one came
	ch  chan os.Signal
}

// watchStops starts watching; stop releases the signals.
func watchStops() *stopper {
	s := &stopper{ch: make(chan os.Signal, 2)}
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
				fmt.Fprintf(os.Stderr, "memtrain: %v again: stopping now, without a checkpoint of this step\n", sig)
				os.Exit(signalExit(first))
			}
			fmt.Fprintf(os.Stderr, "memtrain: %v: finishing this step and saving a checkpoint (send it again to stop at once)\n", sig)
		}
	}()
	return s
}

func (s *stopper) stop() {
	signal.Stop(s.ch)
	close(s.ch)
}

// requested says whether a signal asked the job to stop.
func (s *stopper) requested() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig != nil
}

// signal is the first signal, or nil.
func (s *stopper) signal() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig
}

// signalExit is the shell's exit status of a process ended by sig:
// 128 + its number (SIGINT 130, SIGTERM 143).
func signalExit(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// An exitError ends the command with a status other than 1: after a stop
// by a signal, the signal's status. Its message, if any, is printed as
// every error is.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
