package roce

import "net/netip"

// LinkLocalGID returns the fe80::/64 address made from a MAC address by
// modified EUI-64 (the MAC split by ff:fe, universal/local bit flipped): GID
// index 0 on rxe, present even when IPv6 is disabled on the interface.
func LinkLocalGID(mac [6]byte) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8] = mac[0] ^ 0x02
	b[9], b[10] = mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// GIDFromIP returns the RoCEv2 GID of an IP address: ::ffff:a.b.c.d for IPv4,
// the address itself for IPv6.
func GIDFromIP(ip netip.Addr) netip.Addr {
	return netip.AddrFrom16(ip.As16())
}

// IPFromGID returns the IP address of a RoCEv2 GID: IPv4 for ::ffff:a.b.c.d,
// else the IPv6 address (without zone).
func IPFromGID(gid netip.Addr) netip.Addr {
	return gid.Unmap().WithZone("")
}

// buildGIDTable orders a device's GIDs as rxe does: the EUI-64 link-local
// address, then the first IPv4 address, then the others in the given order,
// without duplicates, at most GIDTableLen.
func buildGIDTable(mac [6]byte, addrs []netip.Addr) []netip.Addr {
	gids := []netip.Addr{LinkLocalGID(mac)}
	seen := map[netip.Addr]bool{gids[0]: true}
	add := func(a netip.Addr) {
		g := GIDFromIP(a.WithZone(""))
		if !seen[g] {
			seen[g] = true
			gids = append(gids, g)
		}
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			add(a)
			break
		}
	}
	for _, a := range addrs {
		if a.IsValid() && len(gids) < GIDTableLen {
			add(a)
		}
	}
	return gids
}
