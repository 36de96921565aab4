//go:build !unix

package reqctx

import "net"

func peekable(net.Conn) bool { return false }

func peerClosed(net.Conn) bool { return false }
