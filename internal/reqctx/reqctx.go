// Package reqctx gives a fasthttp request the context net/http gives
// its requests: cancelled when the client goes away. fasthttp reads nothing
// from a connection while its handler runs, so its RequestCtx is never
// cancelled when the client disconnects (its Done closes at server shutdown
// only); here a request still running after clientWatchAfter has its
// connection peeked at every clientWatchEvery, and fast requests pay for a
// timer only. The dashboard's APIs run their store calls under it.
package reqctx

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	clientWatchAfter = 100 * time.Millisecond
	clientWatchEvery = 100 * time.Millisecond
)

// New is the context of one request: derived from base (the server's,
// cancelled when it stops), cancelled when the client is seen to have
// closed its connection, and by end, which the caller runs once the
// handler is done, before fasthttp writes the answer.
func New(base context.Context, rc *fasthttp.RequestCtx) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancel(base)
	stop := watchClient(rc.Conn(), cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// watchClient calls gone once conn is seen closed by its peer, checking
// from clientWatchAfter on; the returned stop ends the watch and waits for
// a check under way, so the connection is untouched once stop returns.
// Connections that cannot be peeked at (not a socket) are not watched.
func watchClient(conn net.Conn, gone func()) (stop func()) {
	if conn == nil || !peekable(conn) {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var timer *time.Timer
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			gone()
			return
		}
		timer.Reset(clientWatchEvery)
	}
	mu.Lock()
	timer = time.AfterFunc(clientWatchAfter, check)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}
