// Package testleak is the goroutine-leak check every package's TestMain
// runs: go.uber.org/goleak, minus the goroutines fasthttp keeps by design:
// its process-wide Date header updater, a stopped server's worker-pool
// cleaner, a client's connection and address cleaners, which exit after
// their idle sleep, and the workers its gzip and deflate compression start
// once per level and keep (stackless.NewFunc). A server left running still leaks its accept loop, and
// a client call left hanging its goroutine, which are reported.
package testleak

import (
	"testing"

	"go.uber.org/goleak"
)

// Options are the goleak options of Main, for a goleak.VerifyNone in a test.
func Options() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp/stackless.funcWorker"),
	}
}

// Main runs the package's tests and fails them when a goroutine outlives them.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m, Options()...)
}
