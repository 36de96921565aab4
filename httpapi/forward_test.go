package httpapi

import (
	"bufio"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/serving"
)

// requestCtx parses raw as a request read from the wire (so that its raw
// head is kept, as a served request's is).
func requestCtx(t *testing.T, raw string) *fasthttp.RequestCtx {
	t.Helper()
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	ctx := &fasthttp.RequestCtx{}
	req.CopyTo(&ctx.Request)
	return ctx
}

func TestForwardHeadersKeepTheClientsNamesAndValues(t *testing.T) {
	s := &Server{cfg: Config{ForwardHeaders: regexp.MustCompile("(?i)MY_HEADER.*")}}
	ctx := requestCtx(t, "POST /v2/models/m/infer HTTP/1.1\r\nHost: localhost\r\nmy_header_1: my_value_1\r\nMy_Header_2:two\r\n"+
		"my_header_3:  quoted \"x\" with a backslash\\ \r\nheader_1: value_1\r\nContent-Length: 0\r\n\r\n")
	var p serving.Parameters
	if aerr := s.forwardHeaders(ctx, &p); aerr != nil {
		t.Fatal(aerr)
	}
	want := `{"my_header_1":"my_value_1","My_Header_2":"two","my_header_3":"quoted \"x\" with a backslash\\ "}`
	if got := p.JSON(); got != want {
		t.Fatalf("forwarded %s, want %s", got, want)
	}

	s.cfg.ForwardHeaders = regexp.MustCompile("(?i).*")
	ctx = requestCtx(t, "POST /v2/models/m/infer HTTP/1.1\r\nHost: localhost\r\nsequence_id: 1\r\nContent-Length: 0\r\n\r\n")
	if aerr := s.forwardHeaders(ctx, &serving.Parameters{}); aerr == nil || aerr.Status != 400 || !strings.Contains(aerr.Message, "Header 'sequence_id' is reserved for Triton usage") {
		t.Fatalf("a reserved header: %+v", aerr)
	}
	s.cfg.ForwardHeaders = nil
	if aerr := s.forwardHeaders(ctx, &serving.Parameters{}); aerr != nil {
		t.Fatalf("no pattern forwards nothing: %+v", aerr)
	}
}

// FuzzForwardHeaders: whatever head a client sends, forwarding its headers
// never panics, and what reaches the model is one JSON object.
func FuzzForwardHeaders(f *testing.F) {
	f.Add("my_header: v\r\nOther:x\r\n")
	f.Add("my_header:\r\nsequence_id: 1\r\n")
	f.Add("My_Header_é: \"q\\\\\" \r\n")
	s := &Server{cfg: Config{ForwardHeaders: regexp.MustCompile("(?i)my_header|sequence")}}
	f.Fuzz(func(t *testing.T, head string) {
		var req fasthttp.Request
		if req.Read(bufio.NewReader(strings.NewReader("POST /v2/models/m/infer HTTP/1.1\r\nHost: localhost\r\n"+head+"Content-Length: 0\r\n\r\n"))) != nil {
			return
		}
		ctx := &fasthttp.RequestCtx{}
		req.CopyTo(&ctx.Request)
		var p serving.Parameters
		if aerr := s.forwardHeaders(ctx, &p); aerr != nil {
			return
		}
		if js := p.JSON(); js != "" && !json.Valid([]byte(js)) {
			t.Fatalf("not JSON: %q", js)
		}
	})
}
