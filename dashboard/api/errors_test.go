package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/store"
)

// Every package's errors (store, jobs, registry: one fault.Error type) map
// to HTTP in one place, by Kind; an error that is not one is a 500 without
// its text.
func TestFromError(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, filterErr := st.ListExperiments(context.Background(), store.ListQuery{Filter: "name = ", Limit: 1})
	_, notFound := st.GetRun(context.Background(), "nope")
	cases := []struct {
		name   string
		err    error
		status int
		code   string
		has    string
	}{
		{"store filter", filterErr, 400, "invalid_argument", "filter"},
		{"store not found", notFound, 404, "not_found", ""},
		{"store closed", fault.New(fault.Unavailable, store.CodeClosed, "closed"), 503, CodeUnavailable, "shutting down"},
		{"jobs params", &fault.Error{Kind: fault.Unprocessable, Code: "invalid_params", Msg: "bad", Details: []string{"lr: not a number"}}, 422, "invalid_params", "bad"},
		{"registry conflict", fault.New(fault.Conflict, "conflict", "port taken"), 409, "conflict", "port taken"},
		{"too large", fault.New(fault.TooLarge, "batch_too_large", "big"), 413, "batch_too_large", "big"},
		{"unclassified", errors.New("disk on fire"), 500, CodeInternal, ""},
		{"internal kind", fault.New(fault.Internal, "x", "secret detail"), 500, CodeInternal, ""},
	}
	for _, c := range cases {
		e := fromError(log, c.err)
		if e.Status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.has) {
			t.Errorf("%s: %d %s %q, want %d %s containing %q", c.name, e.Status, e.Code, e.Message, c.status, c.code, c.has)
		}
		if c.status == 500 && (strings.Contains(e.Message, "fire") || strings.Contains(e.Message, "secret")) {
			t.Errorf("%s: a 500 carries the error's text: %q", c.name, e.Message)
		}
	}
	if e := fromError(log, filterErr); e.Details == nil {
		t.Error("a filter error lost its column details")
	}
}
