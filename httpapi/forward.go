package httpapi

import (
	"bytes"
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/serving"
)

// forwardHeaders adds the request's headers whose names Config.ForwardHeaders
// matches (anywhere in the name, as tritonserver's
// --http-header-forward-pattern) to p as string parameters, named as the
// client wrote them: fasthttp's parsed headers are capitalised, so the
// names come from the request head as received. A value keeps what follows
// the colon, less the spaces before it. A reserved name is refused.
func (s *Server) forwardHeaders(ctx *fasthttp.RequestCtx, p *serving.Parameters) *APIError {
	re := s.cfg.ForwardHeaders
	if re == nil {
		return nil
	}
	raw := ctx.Request.Header.RawHeaders()
	for len(raw) > 0 {
		line, rest, _ := bytes.Cut(raw, []byte{'\n'})
		raw = rest
		k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte{'\r'}), []byte{':'})
		name := string(bytes.TrimRight(k, " \t"))
		if !ok || name == "" || !re.MatchString(name) {
			continue
		}
		if err := p.AddHeader(name, string(bytes.TrimLeft(v, " \t"))); err != nil {
			return badV2("%s", err.Error())
		}
	}
	return nil
}

// idString is the request's "id" as a string; "" when it has none.
func (r *v2Request) idString() string {
	var id string
	if r.id != nil {
		_ = json.Unmarshal(r.id, &id) // rawID kept a JSON string
	}
	return id
}
