// Package egress is the cynode service's way out to the network: an HTTP
// client that refuses, after DNS resolution, every address that is not a
// public unicast address (loopback, private, link-local, cloud metadata,
// carrier-grade NAT, multicast, reserved) and dials exactly the address it
// checked, so a DNS answer that changes between the check and the
// connection (DNS rebinding) cannot redirect it. It never uses a proxy
// from the environment and never follows redirects itself: callers follow
// them one hop at a time and check each hop.
//
// Tests reach local servers through Hooks, a value only code under
// services/cynode can build (this package is internal), so no
// configuration file can turn the checks off.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// ErrForbiddenAddress is returned when a host resolves to an address the
// service must not connect to.
var ErrForbiddenAddress = errors.New("forbidden address")

// Resolver looks host names up.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Hooks are test-only: a resolver for made-up host names and exact
// address:port pairs exempt from the address checks (the tests' local
// servers). Production code passes nil.
type Hooks struct {
	Resolver Resolver
	// Allow are exempt address:port pairs; every other loopback or private
	// address (another port of 127.0.0.1 too) stays refused.
	Allow []netip.AddrPort
}

var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // carrier-grade NAT (and Alibaba's metadata 100.100.100.200)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // reserved, broadcast
		"64:ff9b::/96",    // NAT64: maps onto IPv4, possibly internal
		"64:ff9b:1::/48",  // local-use NAT64
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4: embeds an IPv4 address
		"2001::/32",       // Teredo
		"100::/64",        // discard
		"fec0::/10",       // site-local (deprecated)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Check says why an address is refused, or nil for a public unicast
// address. IPv4-mapped IPv6 addresses are judged as IPv4.
func Check(a netip.Addr) error {
	a = a.Unmap()
	why := ""
	switch {
	case !a.IsValid():
		why = "invalid"
	case a.IsLoopback():
		why = "loopback"
	case a.IsPrivate():
		why = "private"
	case a.IsLinkLocalUnicast():
		why = "link-local (cloud metadata services live at 169.254.169.254)"
	case a.IsUnspecified():
		why = "unspecified"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		why = "multicast"
	case !a.IsGlobalUnicast():
		why = "not global unicast"
	}
	if why == "" {
		for _, p := range blocked {
			if p.Contains(a) {
				why = "reserved (" + p.String() + ")"
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w: %s is %s", ErrForbiddenAddress, a, why)
}

// Dialer connects only to checked addresses.
type Dialer struct {
	hooks   *Hooks
	timeout time.Duration
}

// NewDialer returns a dialer; hooks is nil outside tests.
func NewDialer(hooks *Hooks) *Dialer { return &Dialer{hooks: hooks, timeout: 10 * time.Second} }

func (d *Dialer) allowed(ap netip.AddrPort) error {
	if d.hooks != nil {
		for _, x := range d.hooks.Allow {
			if x.Addr().Unmap() == ap.Addr().Unmap() && x.Port() == ap.Port() {
				return nil
			}
		}
	}
	return Check(ap.Addr())
}

// Resolve looks host up and checks every address it resolves to: one
// forbidden address refuses the host (a public name must not also point
// inside).
func (d *Dialer) Resolve(ctx context.Context, host string, port uint16) ([]netip.AddrPort, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		var r Resolver = net.DefaultResolver
		if d.hooks != nil && d.hooks.Resolver != nil {
			r = d.hooks.Resolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), port)
		if err := d.allowed(ap); err != nil {
			return nil, fmt.Errorf("host %s: %w", host, err)
		}
		out = append(out, ap)
	}
	return out, nil
}

// DialContext resolves, checks, and dials the checked address (never the
// name again). The socket's Control re-checks the address it connects to.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	aps, err := d.Resolve(ctx, host, uint16(port))
	if err != nil {
		return nil, err
	}
	nd := &net.Dialer{Timeout: d.timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
		}
		return d.allowed(ap)
	}}
	var last error
	for _, ap := range aps {
		c, err := nd.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// Client returns an HTTP client that dials through d, uses no proxy, keeps
// no idle connections (every request dials, and so checks, anew) and
// returns redirects to the caller instead of following them.
func (d *Dialer) Client(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
