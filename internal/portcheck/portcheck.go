// Package portcheck tells whether a TCP address can be listened on, so a
// start-up that cannot listen fails at once with the reason instead of
// timing out.
//
// Caveat: the answer holds for the moment of the check; another process may
// take the address before the caller listens on it. Callers keep handling
// their own listen error.
package portcheck

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// ErrInUse: another socket listens on the address.
var ErrInUse = errors.New("address already in use")

// Free listens on addr (host:port) and closes it again. It returns nil when
// that worked, an error wrapping ErrInUse ("listen ADDR: address already in
// use") when another socket has the address, and "listen ADDR: <reason>"
// otherwise (no such local address, permission denied, …).
func Free(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("listen %s: %w", addr, ErrInUse)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		err = oe.Err
	}
	return fmt.Errorf("listen %s: %w", addr, err)
}
