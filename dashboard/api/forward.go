package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fw-serve/fw/dashboard/replica"
)

// ForwardedHeader marks a request one replica forwarded to another (its
// value is the forwarding replica's ID): a forwarded request is never
// forwarded again.
const ForwardedHeader = "X-Fw-Forwarded-By"

// forwardTimeout bounds a forwarded request (a stop waits for the grace
// period; a prediction for the model).
const forwardTimeout = 90 * time.Second

// forwardClient sends forwarded requests.
var forwardClient = &http.Client{Timeout: forwardTimeout}

// notOwner reports err's *replica.NotOwnerError.
func notOwner(err error) (*replica.NotOwnerError, bool) {
	var e *replica.NotOwnerError
	ok := errors.As(err, &e)
	return e, ok
}

// forward answers a request about something another live replica owns (a
// training job to stop, a deployment to undeploy or to predict through
// when its process runs on the other host) by sending it to that replica's
// API (the URL it advertises in its lease, never one from the request) and
// passing the answer back as it is. body is the request body already read
// (nil to read it here).
func (s *Server) forward(c *call, e *replica.NotOwnerError, body []byte) {
	ctx := c.rc
	if by := ctx.Request.Header.Peek(ForwardedHeader); len(by) > 0 {
		writeError(ctx, apiErr(409, CodeConflict, fmt.Sprintf("%s belongs to dashboard replica %s, which does not own it either (forwarded by %s); retry: ownership is moving", e.Name, e.Owner.ID, by)))
		return
	}
	target, err := url.Parse(e.Owner.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		writeError(ctx, apiErr(503, CodeUnavailable, fmt.Sprintf("%s belongs to dashboard replica %s, which advertises no usable URL (%q): set its --replica-url to an address the other replicas reach", e.Name, e.Owner.ID, e.Owner.URL)))
		return
	}
	target.Path = string(ctx.Path())
	target.RawQuery = string(ctx.QueryArgs().QueryString())
	if body == nil && (ctx.IsPost() || ctx.IsPut() || ctx.IsPatch()) {
		var ae *Error
		if body, ae = s.readBody(ctx); ae != nil {
			writeError(ctx, ae)
			return
		}
	}
	rctx, cancel := context.WithTimeout(c.ctx, forwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, string(ctx.Method()), target.String(), bytes.NewReader(body))
	if err != nil {
		writeError(ctx, apiErr(500, CodeInternal, "building the forwarded request: "+err.Error()))
		return
	}
	for _, h := range []string{"Authorization", "Content-Type", "Accept", "X-Request-Id"} {
		if v := ctx.Request.Header.Peek(h); len(v) > 0 {
			req.Header.Set(h, string(v))
		}
	}
	req.Header.Set(ForwardedHeader, s.cfg.ReplicaID)
	resp, err := forwardClient.Do(req)
	if err != nil {
		writeError(ctx, apiErr(503, CodeUnavailable, fmt.Sprintf("%s belongs to dashboard replica %s at %s, which does not answer (%v); if it stopped, another replica takes it over within the lease time to live: retry then", e.Name, e.Owner.ID, e.Owner.URL, err)))
		return
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		writeError(ctx, apiErr(502, CodeBadGateway, fmt.Sprintf("reading the answer of dashboard replica %s: %v", e.Owner.ID, err)))
		return
	}
	ctx.SetStatusCode(resp.StatusCode)
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		ctx.SetContentType(ct)
	}
	ctx.Response.Header.Set("X-Fw-Replica", e.Owner.ID)
	ctx.SetBody(out)
}
