package roce

import (
	"net/netip"
	"testing"
)

func TestGIDTable(t *testing.T) {
	mac := [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	got := buildGIDTable(mac, []netip.Addr{
		netip.MustParseAddr("2001:db8::5"),
		netip.MustParseAddr("198.51.100.7"),
		netip.MustParseAddr("fe80::5054:ff:fe12:3456"), // the EUI-64 address again
		netip.MustParseAddr("203.0.113.9"),
		netip.MustParseAddr("198.51.100.7"),
	})
	want := []string{"fe80::5054:ff:fe12:3456", "::ffff:198.51.100.7", "2001:db8::5", "::ffff:203.0.113.9"}
	if len(got) != len(want) {
		t.Fatalf("table %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("gid %d = %v, want %v", i, got[i], want[i])
		}
	}
	// No addresses: the link-local GID alone.
	if g := buildGIDTable(mac, nil); len(g) != 1 || g[0] != LinkLocalGID(mac) {
		t.Errorf("empty table %v", g)
	}
}
