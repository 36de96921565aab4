// Package ray runs the dashboard's training jobs on a Ray cluster through
// the Jobs REST API of its head node (POST /api/jobs/, GET
// /api/jobs/{id}, the WebSocket /api/jobs/{id}/logs/tail, POST
// /api/jobs/{id}/stop): Client speaks the API, Executor is the
// jobs.Executor on top of it. Everything Ray answers is untrusted: reads
// are bounded, JSON errors are errors, every call has a timeout, and only
// the configured address is ever called (never an address Ray names, such
// as a job's driver_agent_http_address; no redirects, no proxies).
package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fasthttp/websocket"
)

// Ray's job states (JobStatus in ray.dashboard.modules.job.common).
const (
	StatusPending   = "PENDING"
	StatusRunning   = "RUNNING"
	StatusStopped   = "STOPPED"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
)

// Bounds on what is read from Ray.
const (
	maxInfoBytes  = 1 << 20  // one job's JSON (its message holds up to 20,000 characters of logs)
	maxErrorBytes = 64 << 10 // the body of a non-2xx answer (a Python traceback)
	maxErrorText  = 300      // what of it goes into an error message
)

// ErrNotFound is a 404 from Ray: it does not know the job.
var ErrNotFound = errors.New("no such job on the Ray cluster")

// APIError is a non-2xx answer from Ray; Msg is the last line of its body
// (Ray answers errors with a Python traceback as plain text).
type APIError struct {
	Op     string
	Status int
	Msg    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s: Ray answered %d: %s", e.Op, e.Status, e.Msg)
}

// ParseAddress checks the address of a Ray head's dashboard: an http or
// https URL with a host, optionally a path prefix (a proxy), no user
// information, query or fragment. It returns it without a trailing slash.
func ParseAddress(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("the Ray address %q is not an http:// or https:// URL: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the Ray address %q must be an http:// or https:// URL of the head's dashboard (e.g. http://HOST:8265)", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("the Ray address %q has no host", s)
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("the Ray address %q must not carry a user, query or fragment", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Client calls the Jobs REST API of one Ray head.
type Client struct {
	base    *url.URL
	http    *http.Client
	ws      *websocket.Dialer
	timeout time.Duration
}

// NewClient returns a client of the head at address (see ParseAddress);
// timeout bounds each call (connect, send, answer; a WebSocket's handshake).
func NewClient(address string, timeout time.Duration) (*Client, error) {
	base, err := ParseAddress(address)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                  nil, // only the configured address, never a proxy from the environment
		DialContext:            dialer.DialContext,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Client{
		base: base,
		http: &http.Client{Transport: tr, Timeout: timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		ws:      &websocket.Dialer{NetDialContext: dialer.DialContext, HandshakeTimeout: timeout, Proxy: nil},
		timeout: timeout,
	}, nil
}

// Address is the head's address as configured (no trailing slash).
func (c *Client) Address() string { return c.base.String() }

// Close drops the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// apiPath is an API path under the configured address: the path as it is
// and as it is sent (RawPath, with the job ID escaped into one segment).
type apiPath struct{ path, raw string }

func jobsPath() apiPath { return apiPath{"/api/jobs/", "/api/jobs/"} }

// jobPath is /api/jobs/{id}[suffix].
func jobPath(id, suffix string) apiPath {
	return apiPath{"/api/jobs/" + id + suffix, "/api/jobs/" + url.PathEscape(id) + suffix}
}

// url is p's URL under the configured address.
func (c *Client) url(p apiPath) *url.URL {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + p.raw
	u.Path += p.path
	return &u
}

// SubmitRequest is the body of POST /api/jobs/.
type SubmitRequest struct {
	Entrypoint        string            `json:"entrypoint"`
	SubmissionID      string            `json:"submission_id"`
	RuntimeEnv        RuntimeEnv        `json:"runtime_env"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	EntrypointNumCPUs *float64          `json:"entrypoint_num_cpus,omitempty"`
	EntrypointNumGPUs *float64          `json:"entrypoint_num_gpus,omitempty"`
}

// RuntimeEnv is the part of Ray's runtime_env fw uses.
type RuntimeEnv struct {
	EnvVars map[string]string `json:"env_vars"`
}

// JobInfo is what fw reads of GET /api/jobs/{id} (Ray's JobDetails).
type JobInfo struct {
	SubmissionID   string `json:"submission_id"`
	Status         string `json:"status"`
	Message        string `json:"message"`
	DriverExitCode *int   `json:"driver_exit_code"`
}

// Terminal reports whether status is one Ray never leaves.
func Terminal(status string) bool {
	return status == StatusSucceeded || status == StatusFailed || status == StatusStopped
}

// do sends one request and returns the body of a 2xx answer, read up to
// limit bytes (more is an error); 404 is ErrNotFound, another status an
// *APIError.
func (c *Client) do(parent context.Context, op, method string, path apiPath, body any, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding the request: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path).String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		// The call's context, the client's and the transport's timeouts
		// are the same length: whichever fires first, say so the same way.
		var ne net.Error
		if parent.Err() == nil && (ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout())) {
			return nil, fmt.Errorf("%s: no answer within the timeout (%s): %w", op, c.timeout, err)
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%s: %w (%s)", op, ErrNotFound, lastLine(b))
		}
		return nil, &APIError{Op: op, Status: resp.StatusCode, Msg: lastLine(b)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", op, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: the answer is over %d bytes", op, limit)
	}
	return b, nil
}

// lastLine is the last line of an error body with something printable on
// it, at most maxErrorText bytes (Ray's tracebacks end with the exception).
func lastLine(b []byte) string {
	lines := strings.Split(strings.ToValidUTF8(string(b), "?"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(clean(lines[i], len(lines[i]))); l != "" && l != "(no message)" {
			return clean(l, maxErrorText)
		}
	}
	return "(no message)"
}

// clean keeps the printable characters of s, cut to at most n bytes.
func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) || r == ' ' {
			return r
		}
		return ' '
	}, s)
	if len(s) > n {
		k := n
		for k > 0 && !utf8.RuneStart(s[k]) {
			k--
		}
		s = s[:k] + "…"
	}
	if s == "" {
		return "(no message)"
	}
	return s
}

// Submit submits a job: POST /api/jobs/. Ray answers with the submission
// ID, which must be the one asked for.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) error {
	op := "submitting job " + req.SubmissionID + " to Ray at " + c.Address()
	b, err := c.do(ctx, op, http.MethodPost, jobsPath(), req, 64<<10)
	if err != nil {
		return err
	}
	var out struct {
		SubmissionID string `json:"submission_id"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("%s: the answer is not Ray's JSON: %w", op, err)
	}
	if out.SubmissionID != req.SubmissionID {
		return fmt.Errorf("%s: Ray answered with submission ID %q", op, clean(out.SubmissionID, 100))
	}
	return nil
}

// Job reads a job's state: GET /api/jobs/{id}.
func (c *Client) Job(ctx context.Context, id string) (JobInfo, error) {
	op := "reading job " + id + " from Ray at " + c.Address()
	b, err := c.do(ctx, op, http.MethodGet, jobPath(id, ""), nil, maxInfoBytes)
	if err != nil {
		return JobInfo{}, err
	}
	info, err := DecodeJobInfo(b)
	if err != nil {
		return JobInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	if info.SubmissionID != id {
		return JobInfo{}, fmt.Errorf("%s: Ray answered about job %q", op, clean(info.SubmissionID, 100))
	}
	return info, nil
}

// DecodeJobInfo decodes Ray's JobDetails: a JSON object with a string
// status (one of Ray's five, else an error) and optional message and exit
// code.
func DecodeJobInfo(b []byte) (JobInfo, error) {
	var info JobInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return JobInfo{}, fmt.Errorf("the answer is not Ray's job JSON: %w", err)
	}
	switch info.Status {
	case StatusPending, StatusRunning, StatusStopped, StatusSucceeded, StatusFailed:
	default:
		return JobInfo{}, fmt.Errorf("the answer has an unknown job status %q", clean(info.Status, 40))
	}
	return info, nil
}

// Stop asks Ray to stop a job: POST /api/jobs/{id}/stop (SIGTERM to the
// entrypoint's processes, SIGKILL after RAY_JOB_STOP_WAIT_TIME_S). A job
// that has already ended is not an error.
func (c *Client) Stop(ctx context.Context, id string) error {
	op := "stopping job " + id + " on Ray at " + c.Address()
	b, err := c.do(ctx, op, http.MethodPost, jobPath(id, "/stop"), nil, 64<<10)
	if err != nil {
		return err
	}
	var out struct {
		Stopped *bool `json:"stopped"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Stopped == nil {
		return fmt.Errorf("%s: the answer is not Ray's {\"stopped\": ...}: %q", op, clean(string(b), 100))
	}
	return nil
}

// TailLogs follows a job's log through the WebSocket
// /api/jobs/{id}/logs/tail: Ray sends the log file from its first byte,
// then what is appended, and closes the connection once the job has ended
// and everything was sent. The first skip bytes are dropped (what an
// earlier connection delivered); the rest is written to w. It returns the
// bytes received (skipped ones included) and nil when Ray closed the
// connection normally, else why it ended. Cancelling ctx closes it.
func (c *Client) TailLogs(ctx context.Context, id string, skip int64, w io.Writer) (int64, error) {
	u := c.url(jobPath(id, "/logs/tail"))
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	conn, resp, err := c.ws.DialContext(ctx, u.String(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return 0, fmt.Errorf("following the logs of job %s on Ray at %s: Ray answered %d", id, c.Address(), resp.StatusCode)
		}
		return 0, fmt.Errorf("following the logs of job %s on Ray at %s: %w", id, c.Address(), err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		conn.Close()
	}()
	var n int64
	for {
		_, r, err := conn.NextReader()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
				return n, nil
			}
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, fmt.Errorf("following the logs of job %s on Ray at %s: %w", id, c.Address(), err)
		}
		// Stream the message (its size is unbounded: one long line is one
		// message), dropping what was delivered before.
		sw := &skipWriter{w: w, skip: skip - n}
		m, err := io.Copy(sw, r)
		n += m
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, fmt.Errorf("following the logs of job %s on Ray at %s: %w", id, c.Address(), err)
		}
	}
}

// skipWriter drops its first skip bytes and writes the rest to w.
type skipWriter struct {
	w    io.Writer
	skip int64
}

func (s *skipWriter) Write(b []byte) (int, error) {
	n := len(b)
	if s.skip > 0 {
		d := min(int64(len(b)), s.skip)
		s.skip -= d
		b = b[d:]
	}
	if len(b) > 0 {
		if _, err := s.w.Write(b); err != nil {
			return 0, err
		}
	}
	return n, nil
}
