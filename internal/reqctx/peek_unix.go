//go:build unix

package reqctx

import (
	"crypto/tls"
	"net"
	"syscall"
)

// rawConn is the socket under conn (a TLS connection's too), or nil.
func rawConn(conn net.Conn) syscall.RawConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

func peekable(conn net.Conn) bool { return rawConn(conn) != nil }

// peerClosed reports whether the peer has closed conn: a peek (which
// consumes nothing, so a pipelined next request stays for fasthttp) that
// reads end-of-file, or fails with anything but "nothing yet".
func peerClosed(conn net.Conn) bool {
	raw := rawConn(conn)
	if raw == nil {
		return false
	}
	var buf [1]byte
	closed := false
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
		case err != nil:
			closed = true
		case n == 0:
			closed = true
		}
		return true // never wait for the socket to become readable
	})
	return closed
}
