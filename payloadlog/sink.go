package payloadlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxPostBytes bounds one POST to the dashboard (its body limit is larger).
const maxPostBytes = 4 << 20

// remoteSink sends batches as NDJSON somewhere that can be away: the
// dashboard's /api/payloads, or a bucket (an object a batch). A batch not
// taken goes to the spool, sent again by retry.
type remoteSink struct {
	l     *Logger
	send  func(ctx context.Context, ndjson []byte) error
	stop  func()
	spool *spool // nil: no spool, a batch not taken is dropped
}

func newRemoteSink(cfg Config, l *Logger, send func(context.Context, []byte) error, stop func()) (*remoteSink, error) {
	s := &remoteSink{l: l, send: send, stop: stop}
	if cfg.SpoolDir != "" {
		sp, err := openSpool(cfg.SpoolDir, cfg.SpoolBytes)
		if err != nil {
			return nil, err
		}
		s.spool = sp
	}
	return s, nil
}

// dashboard POSTs NDJSON to the dashboard at u.
type dashboard struct {
	url    string
	token  string
	client *http.Client
}

func newDashboardSink(cfg Config, u *url.URL, l *Logger) (*remoteSink, error) {
	d := &dashboard{url: u.JoinPath("/api/payloads").String(), token: cfg.Token,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}}
	return newRemoteSink(cfg, l, d.post, d.client.CloseIdleConnections)
}

// Objects is a bucket records can be written to (dashboard/blob's Store
// satisfies it): each batch becomes one NDJSON object.
type Objects interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	String() string
}

func newObjectSink(cfg Config, l *Logger) (*remoteSink, error) {
	name := cfg.Deployment
	if name == "" {
		name = "fw-serve"
	}
	name = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' {
			return '_'
		}
		return r
	}, name)
	put := func(ctx context.Context, body []byte) error {
		now := time.Now().UTC()
		key := fmt.Sprintf("payloads/%s/%s-%020d.jsonl", now.Format("2006/01/02/15"), name, now.UnixNano())
		if err := cfg.Objects.Put(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
			return fmt.Errorf("writing %s to %s: %w", key, cfg.Objects, err)
		}
		return nil
	}
	return newRemoteSink(cfg, l, put, func() {})
}

func encode(recs []*Record) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range recs {
		_ = enc.Encode(r) // a Record always encodes: no NaN, no channels
	}
	return b.Bytes()
}

func (s *remoteSink) write(ctx context.Context, recs []*Record) error {
	body := encode(recs)
	err := s.send(ctx, body)
	if err == nil {
		s.l.sent.Add(uint64(len(recs)))
		return nil
	}
	var refused *refusedError
	if s.spool == nil || errors.As(err, &refused) {
		s.l.dropped.Add(uint64(len(recs)))
		return err
	}
	if serr := s.spool.add(body, len(recs)); serr != nil {
		s.l.dropped.Add(uint64(len(recs)))
		return fmt.Errorf("%w; and the spool did not take them: %v", err, serr)
	}
	s.l.spooled.Add(uint64(len(recs)))
	return nil
}

// refusedError is the dashboard refusing a batch for what it holds (4xx
// other than 401, 408, 429): sending it again would not help.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// post sends NDJSON lines to the dashboard, in pieces of at most
// maxPostBytes (at line boundaries).
func (s *dashboard) post(ctx context.Context, body []byte) error {
	for len(body) > 0 {
		n := len(body)
		if n > maxPostBytes {
			n = bytes.LastIndexByte(body[:maxPostBytes], '\n') + 1
			if n <= 0 {
				n = bytes.IndexByte(body, '\n') + 1 // one record larger than the piece
				if n <= 0 {
					n = len(body)
				}
			}
		}
		if err := s.postOne(ctx, body[:n]); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

func (s *dashboard) postOne(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("the dashboard at %s did not answer: %w", s.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != 401 && resp.StatusCode != 408 && resp.StatusCode != 429:
		return &refusedError{msg: fmt.Sprintf("the dashboard refused the records: %s: %s", resp.Status, strings.TrimSpace(string(msg)))}
	}
	return fmt.Errorf("the dashboard answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

// retry sends the spool's files, oldest first, until one fails.
func (s *remoteSink) retry(ctx context.Context) {
	if s.spool == nil {
		return
	}
	for {
		path, n, ok := s.spool.oldest()
		if !ok {
			return
		}
		body, err := os.ReadFile(path)
		if err != nil {
			s.spool.remove(path)
			s.l.dropped.Add(uint64(n))
			continue
		}
		err = s.send(ctx, body)
		var refused *refusedError
		switch {
		case err == nil:
			s.l.sent.Add(uint64(n))
		case errors.As(err, &refused):
			s.l.dropped.Add(uint64(n))
			s.l.log.Warn("payload logging: the dashboard refused spooled records; they are dropped", "file", path, "err", err)
		default:
			return // still away: keep the file
		}
		s.spool.remove(path)
	}
}

func (s *remoteSink) close() { s.stop() }

// spool is a directory of NDJSON files (spool-<unix nanos>-<records>.ndjson)
// holding what the dashboard did not take, at most max bytes.
type spool struct {
	dir   string
	max   int64
	bytes int64
}

func openSpool(dir string, max int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("payload spool %s: %w", dir, err)
	}
	s := &spool{dir: dir, max: max}
	for _, f := range s.files() {
		if st, err := os.Stat(f); err == nil {
			s.bytes += st.Size()
		}
	}
	return s, nil
}

// files are the spool's files, oldest first.
func (s *spool) files() []string {
	fs, _ := filepath.Glob(filepath.Join(s.dir, "spool-*.ndjson"))
	slices.Sort(fs) // the names' fixed-width times sort as the times
	return fs
}

func (s *spool) add(body []byte, n int) error {
	if s.bytes+int64(len(body)) > s.max {
		return fmt.Errorf("the spool %s holds %d bytes, its limit is %d", s.dir, s.bytes, s.max)
	}
	name := filepath.Join(s.dir, fmt.Sprintf("spool-%020d-%d.ndjson", time.Now().UnixNano(), n))
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	s.bytes += int64(len(body))
	return nil
}

// oldest is the oldest file and how many records it holds.
func (s *spool) oldest() (string, int, bool) {
	fs := s.files()
	if len(fs) == 0 {
		return "", 0, false
	}
	base := strings.TrimSuffix(filepath.Base(fs[0]), ".ndjson")
	n, _ := strconv.Atoi(base[strings.LastIndexByte(base, '-')+1:])
	return fs[0], n, true
}

func (s *spool) remove(path string) {
	if st, err := os.Stat(path); err == nil {
		s.bytes -= st.Size()
	}
	os.Remove(path)
}

// fileSink appends records to JSONL files in a directory, one file an
// hour (payloads-YYYYMMDD-HH.jsonl), removing the oldest beyond max bytes.
type fileSink struct {
	l   *Logger
	dir string
	max int64
}

func newFileSink(l *Logger, dir string, max int64) (*fileSink, error) {
	if dir == "" {
		return nil, fmt.Errorf("payload logging needs a destination: the dashboard's URL or a directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("payload directory %s: %w", dir, err)
	}
	return &fileSink{l: l, dir: dir, max: max}, nil
}

func (f *fileSink) write(_ context.Context, recs []*Record) error {
	name := filepath.Join(f.dir, "payloads-"+time.Now().UTC().Format("20060102-15")+".jsonl")
	fh, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.l.dropped.Add(uint64(len(recs)))
		return err
	}
	w := bufio.NewWriter(fh)
	_, err = w.Write(encode(recs))
	if err == nil {
		err = w.Flush()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		f.l.dropped.Add(uint64(len(recs)))
		return err
	}
	f.l.sent.Add(uint64(len(recs)))
	f.prune()
	return nil
}

// prune removes the oldest files while the directory holds more than max.
func (f *fileSink) prune() {
	fs, _ := filepath.Glob(filepath.Join(f.dir, "payloads-*.jsonl"))
	slices.Sort(fs)
	var total int64
	sizes := make([]int64, len(fs))
	for i, p := range fs {
		if st, err := os.Stat(p); err == nil {
			sizes[i] = st.Size()
			total += sizes[i]
		}
	}
	for i := 0; i < len(fs)-1 && total > f.max; i++ { // the current hour's file stays
		os.Remove(fs[i])
		total -= sizes[i]
	}
}

func (f *fileSink) retry(context.Context) {}
func (f *fileSink) close()                {}
