package comm

import (
	"fmt"
	"os"
	"time"
)

// ExitTimeout is the exit status of a process ended by a Watchdog.
const ExitTimeout = 3

// A Watchdog guards collectives that cannot be cancelled once blocked in
// C (MPI, NCCL): when one outlives Timeout, it reports the collective and
// ends the process, since waiting longer would hang the whole job, and
// with the process gone mpirun or srun ends the job's other ranks too.
type Watchdog struct {
	Timeout time.Duration
	// Fire is called, on a goroutine of its own, with the *Error of a
	// collective that outlived Timeout. Nil means: write it to standard
	// error and exit with status ExitTimeout. Tests set it.
	Fire func(err error)
}

// Watch starts the clock for the collective described by e (its Err is
// set to a *TimeoutError) and returns the function that stops it, to be
// called when the collective returns.
func (w *Watchdog) Watch(e Error) (stop func()) {
	e.Err = &TimeoutError{Peer: -1, Timeout: w.Timeout}
	fire := w.Fire
	if fire == nil {
		fire = exitOnTimeout
	}
	t := time.AfterFunc(w.Timeout, func() { fire(&e) })
	return func() { t.Stop() }
}

func exitOnTimeout(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(ExitTimeout)
}
