//go:build unix

package cluster

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// probeClosed reports whether the peer has closed conn (or reset it),
// without waiting and without consuming anything: a peek at the socket.
// nil means open as far as the socket knows.
func probeClosed(conn net.Conn) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var probe error
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			probe = io.EOF
		case err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			probe = err
		}
		return true // never wait for readability
	})
	if err != nil {
		return err
	}
	return probe
}
