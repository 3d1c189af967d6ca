package comm

import (
	"fmt"
	"time"
)

// Error is the error of a collective: which group, rank, operation and
// step it happened at, and why (Err). Every error a communicator returns
// from a collective is an *Error.
type Error struct {
	Group      string
	Rank, Size int
	Op         Op
	Step       int
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("comm: group %q (rank %d of %d): %v at step %d: %v", e.Group, e.Rank, e.Size, e.Op, e.Step, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// TimeoutError is the cause of an *Error when the watchdog gave up on a
// collective: no answer from the group within Timeout.
type TimeoutError struct {
	// Peer is a rank that had not joined the collective, or −1 when the
	// implementation cannot tell (MPI, NCCL).
	Peer    int
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	if e.Peer < 0 {
		return "no answer from the group within " + formatDuration(e.Timeout)
	}
	return fmt.Sprintf("no answer from rank %d within %s", e.Peer, formatDuration(e.Timeout))
}

// formatDuration writes whole seconds as "60s" rather than Go's "1m0s",
// which reads oddly in a message about a timeout set in seconds.
func formatDuration(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
