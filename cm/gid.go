package cm

import (
	"encoding/hex"
	"fmt"
	"net/netip"
)

// GID is a RoCE global identifier: an IPv6 address, or an IPv4 one mapped as ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address (IPv4 addresses are mapped to ::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, unmapped to IPv4 when it is ::ffff:a.b.c.d.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String gives the address form, e.g. "::ffff:198.51.100.2" (as rdma-core prints it).
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Hex gives the 32 hex digits of the 16 bytes in order, as the pingpong tools send them.
func (g GID) Hex() string { return hex.EncodeToString(g[:]) }

// IsZero reports whether all 16 bytes are zero.
func (g GID) IsZero() bool { return g == GID{} }

// ParseGIDHex parses 32 hex digits (the pingpong wire form).
func ParseGIDHex(s string) (GID, error) {
	var g GID
	if len(s) != 32 {
		return g, fmt.Errorf("cm: gid %q: want 32 hex digits, got %d characters", s, len(s))
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, fmt.Errorf("cm: gid %q: %v", s, err)
	}
	return g, nil
}

// MarshalText gives the address form, so GIDs read naturally in JSON.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText accepts the address form ("::ffff:198.51.100.2", "198.51.100.2", "fe80::1")
// or 32 hex digits.
func (g *GID) UnmarshalText(b []byte) error {
	if len(b) == 32 {
		if v, err := ParseGIDHex(string(b)); err == nil {
			*g = v
			return nil
		}
	}
	a, err := netip.ParseAddr(string(b))
	if err != nil {
		return fmt.Errorf("cm: gid %q: not an IP address or 32 hex digits", b)
	}
	*g = GIDFromAddr(a)
	return nil
}
