package roce

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// frameWithID encodes an RC SEND_ONLY frame whose IPv4 Identification is id.
func frameWithID(t *testing.T, id uint16, payload []byte) []byte {
	t.Helper()
	p := wire.Packet{
		SrcIP: netip.MustParseAddr("198.51.100.1"), DstIP: netip.MustParseAddr("198.51.100.2"),
		TTL: 64, IPID: id, IPFlags: 2, SrcPort: 49441, DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQPN: 0x11, PSN: 0x123456, AckReq: true},
		Payload: payload,
	}
	buf := make([]byte, 9100)
	n, err := p.Encode(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestICRCIDRepair: a frame sent with IP ID x and received with the ID
// rebuilt as 0 is accepted; corruptions elsewhere are not.
func TestICRCIDRepair(t *testing.T) {
	for _, size := range []int{0, 1, 60, 1024, 4096} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i*13 + size)
		}
		for _, id := range []uint16{1, 0x1234, 0xFFFF, 0x8000} {
			sent := frameWithID(t, id, payload)
			rebuilt := frameWithID(t, 0, payload)
			copy(rebuilt[len(rebuilt)-4:], sent[len(sent)-4:]) // the sender's ICRC
			var p wire.Packet
			err := p.Decode(rebuilt)
			if !errors.Is(err, wire.ErrBadICRC) {
				t.Fatalf("size %d id %#x: decode of the rebuilt frame: %v, want ErrBadICRC", size, id, err)
			}
			if !(icrcRepair{}).explains(rebuilt, &p) {
				t.Errorf("size %d id %#x: mismatch from the IP ID alone not recognised", size, id)
			}
			// The same frame with one payload or header byte flipped is refused.
			var flips, refused int
			for off := 14 + 20 + 8; off < len(rebuilt)-4; off += 7 {
				c := append([]byte(nil), rebuilt...)
				c[off] ^= 0x5A
				if c[off] == rebuilt[off] {
					continue
				}
				if err := p.Decode(c); !errors.Is(err, wire.ErrBadICRC) {
					continue // caught by another check
				}
				flips++
				if !(icrcRepair{}).explains(c, &p) {
					refused++
				}
			}
			if refused != flips {
				t.Errorf("size %d id %#x: %d of %d corrupted frames were taken for an IP ID change", size, id, flips-refused, flips)
			}
		}
	}
	// A frame that was not rebuilt (ID not 0) is never repaired.
	f := frameWithID(t, 7, []byte("hello!!!"))
	f[len(f)-5] ^= 1
	var p wire.Packet
	if err := p.Decode(f); !errors.Is(err, wire.ErrBadICRC) {
		t.Fatalf("decode: %v", err)
	}
	if (icrcRepair{}).explains(f, &p) {
		t.Error("repaired a frame whose IP ID is known")
	}
}

func TestICRCRepairAllocs(t *testing.T) {
	sent := frameWithID(t, 0x4321, make([]byte, 1000))
	rebuilt := frameWithID(t, 0, make([]byte, 1000))
	copy(rebuilt[len(rebuilt)-4:], sent[len(sent)-4:])
	var p wire.Packet
	allocs := testing.AllocsPerRun(100, func() {
		_ = p.Decode(rebuilt)
		if !(icrcRepair{}).explains(rebuilt, &p) {
			t.Fatal("not repaired")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame, want 0", allocs)
	}
}

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
