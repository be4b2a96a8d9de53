package mcast

import (
	"net/netip"
	"testing"
)

// TestSealOpen: a datagram opens under the key it was sealed with, and not
// under another key, truncated or with a byte changed.
func TestSealOpen(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	m := &msg{Kind: kindOffer, Member: 7, Session: 9, Name: "f.bin", Size: 12, CtxBase: 0xFF0100, Ctxs: 8}
	b := seal(key, m)
	got, err := open(key, b)
	if err != nil || *got != *m {
		t.Fatalf("open: %+v, %v", got, err)
	}
	if _, err := open([]byte("another key, as long as the first"), b); err != errBadMAC {
		t.Errorf("another key: %v", err)
	}
	if _, err := open(key, b[:macLen-1]); err != errBadMAC {
		t.Errorf("truncated: %v", err)
	}
	b[len(b)-2] ^= 1
	if _, err := open(key, b); err != errBadMAC {
		t.Errorf("changed: %v", err)
	}
}

// TestCheckNameGroup: offers name base names only; groups are IPv4 or
// IPv6 multicast addresses.
func TestCheckNameGroup(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b", "../x", "/etc/passwd"} {
		if checkName(n) == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if err := checkName("image.iso"); err != nil {
		t.Error(err)
	}
	for _, g := range []string{"198.51.100.1", "2001:db8::1", "255.255.255.255", "::ffff:239.1.2.3", "ff02::1%eth0"} {
		if CheckGroup(netip.MustParseAddr(g)) == nil {
			t.Errorf("group %s accepted", g)
		}
	}
	for _, g := range []string{"239.1.2.3", "ff15::1:2:3"} {
		if err := CheckGroup(netip.MustParseAddr(g)); err != nil {
			t.Error(err)
		}
	}
}
