package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		addr string
		why  string // "" allowed
	}{
		{"93.184.215.14", ""},
		{"2606:4700::1111", ""},
		{"127.0.0.1", "loopback"},
		{"127.5.6.7", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00:ec2::254", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "reserved"},
		{"100.100.100.200", "reserved"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "not global unicast"},
		{"64:ff9b::a00:1", "reserved"},
		{"2002:7f00:1::", "reserved"},
	} {
		err := Check(netip.MustParseAddr(tc.addr))
		if tc.why == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.addr, err)
			}
			continue
		}
		if !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v, want %s", tc.addr, err, tc.why)
		}
	}
}

type fixed map[string][]netip.Addr

func (f fixed) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return f[host], nil
}

func TestResolveRefusesAnyForbiddenAnswerAndHonoursOnlyExactExemptions(t *testing.T) {
	site := netip.MustParseAddrPort("127.0.0.1:8080")
	d := NewDialer(&Hooks{Resolver: fixed{
		"site.test":  {site.Addr()},
		"mixed.test": {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.1")},
	}, Allow: []netip.AddrPort{site}})
	ctx := context.Background()
	if _, err := d.Resolve(ctx, "site.test", 8080); err != nil {
		t.Fatalf("exempt pair: %v", err)
	}
	for _, tc := range []struct {
		host string
		port uint16
	}{{"site.test", 8081}, {"127.0.0.1", 9}, {"mixed.test", 80}} {
		if _, err := d.Resolve(ctx, tc.host, tc.port); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s:%d: %v", tc.host, tc.port, err)
		}
	}
	if _, err := NewDialer(nil).Resolve(ctx, "127.0.0.1", 8080); !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("no hooks: loopback: %v", err)
	}
}
