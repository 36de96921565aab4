package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// envFlags registers flags whose default comes from an environment variable,
// so every flag can be set either way; flags win over the environment. The
// plain methods derive the variable from the flag name (FW_<NAME>); the *Env
// methods take it explicitly. The first malformed value is kept in err.
type envFlags struct {
	fs  *flag.FlagSet
	err error
}

func envKey(name string) string {
	return "FW_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// fail records the first malformed environment value.
func (e *envFlags) fail(key, v, want string) {
	if e.err == nil {
		e.err = fmt.Errorf("%s=%q: not %s", key, v, want)
	}
}

func (e *envFlags) String(name, def, usage string) *string {
	return e.StringEnv(name, envKey(name), def, usage)
}

// StringEnv is String with an explicit environment variable.
func (e *envFlags) StringEnv(name, key, def, usage string) *string {
	if v, ok := os.LookupEnv(key); ok {
		def = v
	}
	return e.fs.String(name, def, usage+" ["+key+"]")
}

func (e *envFlags) Int(name string, def int, usage string) *int {
	return e.IntEnv(name, envKey(name), def, usage)
}

// IntEnv is Int with an explicit environment variable.
func (e *envFlags) IntEnv(name, key string, def int, usage string) *int {
	if v, ok := os.LookupEnv(key); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.fail(key, v, "an integer")
		}
		def = n
	}
	return e.fs.Int(name, def, usage+" ["+key+"]")
}

func (e *envFlags) Int64(name string, def int64, usage string) *int64 {
	key := envKey(name)
	if v, ok := os.LookupEnv(key); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			e.fail(key, v, "an integer")
		}
		def = n
	}
	return e.fs.Int64(name, def, usage+" ["+key+"]")
}

func (e *envFlags) Duration(name string, def time.Duration, usage string) *time.Duration {
	return e.DurationEnv(name, envKey(name), def, usage)
}

// DurationEnv is Duration with an explicit environment variable.
func (e *envFlags) DurationEnv(name, key string, def time.Duration, usage string) *time.Duration {
	if v, ok := os.LookupEnv(key); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.fail(key, v, "a duration such as 1ms, 30s or 24h")
		}
		def = d
	}
	return e.fs.Duration(name, def, usage+" ["+key+"]")
}

func (e *envFlags) Bool(name string, def bool, usage string) *bool {
	key := envKey(name)
	if v, ok := os.LookupEnv(key); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.fail(key, v, "true or false")
		}
		def = b
	}
	return e.fs.Bool(name, def, usage+" ["+key+"]")
}

// parse parses args and reports, as ok=false with the exit code, --help
// (0), a bad flag (2) or a malformed environment value (2, named on stderr).
func (e *envFlags) parse(cmd string, args []string, stderr io.Writer) (code int, ok bool) {
	if err := e.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if e.err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, e.err)
		return 2, false
	}
	return 0, true
}

// listen opens the TCP listener of a server command. A port already in use
// is one line naming the port (the caller exits 1), not a stack trace.
func listen(cmd, host string, port int, stderr io.Writer) (net.Listener, bool) {
	return listenFlag(cmd, "--port", host, port, stderr)
}

// listenFlag is listen for the port set by flag, which the error names.
func listenFlag(cmd, flag, host string, port int, stderr io.Writer) (net.Listener, bool) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "%s: port %d is already in use on %s; stop the other process or choose another with %s\n", cmd, port, host, flag)
		} else {
			fmt.Fprintf(stderr, "%s: listen on %s: %v\n", cmd, addr, err)
		}
		return nil, false
	}
	return ln, true
}

// List is a repeatable flag (--load-model a --load-model b); its
// environment variable holds the values comma-separated.
func (e *envFlags) List(name, usage string) *[]string {
	key := envKey(name)
	l := &listFlag{}
	if v, ok := os.LookupEnv(key); ok {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				l.vals = append(l.vals, s)
			}
		}
		l.fromEnv = true
	}
	e.fs.Var(l, name, usage+" (repeatable) ["+key+", comma-separated]")
	return &l.vals
}

// listFlag collects a repeated flag's values; values given on the command
// line replace those from the environment.
type listFlag struct {
	vals    []string
	fromEnv bool
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(v string) error {
	if l.fromEnv {
		l.vals, l.fromEnv = nil, false
	}
	l.vals = append(l.vals, v)
	return nil
}
