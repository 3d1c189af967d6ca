package comm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultTimeout is how long a collective waits for the rest of its group
// before the watchdog gives up on it, unless WithTimeout or TimeoutEnv says
// otherwise. It is long because a healthy rank may be late by a whole
// forward or backward pass of a layer, or by a checkpoint being saved.
const DefaultTimeout = 60 * time.Second

// TimeoutEnv names the environment variable that sets the watchdog timeout
// when no WithTimeout option does: a Go duration ("90s", "5m") or a number
// of seconds ("90").
const TimeoutEnv = "MEMTRAIN_COMM_TIMEOUT"

// Config is what the options of a world communicator resolve to. It is
// exported for implementations outside this package (MPI, NCCL).
type Config struct {
	// Name is the group name of the world ("world" by default).
	Name string
	// Timeout is the watchdog timeout (see the package documentation).
	Timeout time.Duration
}

// An Option configures a world communicator.
type Option func(*Config)

// WithTimeout sets the watchdog timeout; it wins over TimeoutEnv.
func WithTimeout(d time.Duration) Option { return func(c *Config) { c.Timeout = d } }

// WithName names the world group.
func WithName(name string) Option { return func(c *Config) { c.Name = name } }

// NewConfig applies opts to the defaults: the name "world" and the timeout
// from TimeoutEnv, or DefaultTimeout when it is unset. A malformed
// TimeoutEnv is an error even when an option sets the timeout, so that a
// typo is not silently ignored.
func NewConfig(opts ...Option) (Config, error) {
	d, ok, err := EnvTimeout()
	if err != nil {
		return Config{}, err
	}
	if !ok {
		d = DefaultTimeout
	}
	c := Config{Name: "world", Timeout: d}
	for _, o := range opts {
		o(&c)
	}
	if c.Timeout <= 0 {
		return Config{}, fmt.Errorf("comm: watchdog timeout %v is not positive", c.Timeout)
	}
	if c.Name == "" {
		return Config{}, fmt.Errorf("comm: empty group name")
	}
	return c, nil
}

// EnvTimeout reads TimeoutEnv: the duration, whether it is set, and an
// error when it is set but malformed or not positive.
func EnvTimeout() (time.Duration, bool, error) {
	s, ok := os.LookupEnv(TimeoutEnv)
	s = strings.TrimSpace(s)
	if !ok || s == "" {
		return 0, false, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, err2 := strconv.ParseFloat(s, 64)
		if err2 != nil {
			return 0, true, fmt.Errorf("comm: %s=%q is neither a duration (\"90s\") nor a number of seconds", TimeoutEnv, s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, true, fmt.Errorf("comm: %s=%q is not a positive duration", TimeoutEnv, s)
	}
	return d, true, nil
}
