//go:build unix

package reqctx

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchClientSeesADisconnect: a request's client that closes its
// connection while the handler runs cancels the request (fasthttp itself
// never notices); one that stays, or sends a pipelined request, does not;
// and after stop nothing is checked any more.
func TestWatchClientSeesADisconnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client, server net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	wait := func(n *atomic.Int32, want int32, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if n.Load() == want {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return n.Load() == want
	}

	// Gone: the client closes mid-request.
	c1, s1 := pair()
	defer s1.Close()
	var gone1 atomic.Int32
	stop1 := watchClient(s1, func() { gone1.Add(1) })
	time.Sleep(2 * clientWatchAfter)
	if gone1.Load() != 0 {
		t.Fatal("a connected client was taken for gone")
	}
	c1.Close()
	if !wait(&gone1, 1, 2*time.Second) {
		t.Fatal("a closed client was not noticed")
	}
	stop1()

	// Staying, with a pipelined request waiting to be read: not gone, and
	// the bytes are still there for fasthttp once the watch stops.
	c2, s2 := pair()
	defer c2.Close()
	defer s2.Close()
	var gone2 atomic.Int32
	stop2 := watchClient(s2, func() { gone2.Add(1) })
	if _, err := c2.Write([]byte("GET /health HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * clientWatchEvery)
	stop2()
	if gone2.Load() != 0 {
		t.Fatal("a client with a pipelined request was taken for gone")
	}
	buf := make([]byte, 64)
	s2.SetReadDeadline(time.Now().Add(time.Second))
	n, err := s2.Read(buf)
	if err != nil || string(buf[:n]) != "GET /health HTTP/1.1\r\n" {
		t.Fatalf("the pipelined bytes were consumed: %q %v", buf[:n], err)
	}

	// Stopped before the client leaves: nothing is called.
	c3, s3 := pair()
	defer s3.Close()
	var gone3 atomic.Int32
	stop3 := watchClient(s3, func() { gone3.Add(1) })
	stop3()
	c3.Close()
	time.Sleep(2*clientWatchAfter + 2*clientWatchEvery)
	if gone3.Load() != 0 {
		t.Fatal("a stopped watch still checked the connection")
	}
}
