package wire_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// TestPeekDestQPN: on every frame Decode accepts (rxe's captures; random
// packets over IPv4 and IPv6, with and without a VLAN tag) PeekDestQPN reads
// the QPN Decode does; on frames that are not RoCE it says so.
func TestPeekDestQPN(t *testing.T) {
	check := func(name string, f []byte) {
		var p wire.Packet
		if err := p.Decode(f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		qpn, ok := wire.PeekDestQPN(f)
		if !ok || qpn != p.BTH.DestQPN {
			t.Fatalf("%s: PeekDestQPN %#x %v, Decode %#x", name, qpn, ok, p.BTH.DestQPN)
		}
	}
	for i, f := range rxeFrames(t) {
		check(fmt.Sprintf("rxe frame %d", i), f.data)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 64 {
		p := randomPacket(rng, wire.RCSendOnly, i&1 != 0, i&2 != 0, i&4, 16)
		b := make([]byte, p.FrameLen())
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		check("random", b)
		// Not RoCE: another UDP port, then cut short.
		b[len(b)-len(p.Payload)-wire.BTHLen-wire.ICRCLen-6] ^= 0xFF
		if _, ok := wire.PeekDestQPN(b); ok {
			t.Fatalf("frame to another UDP port: PeekDestQPN ok")
		}
		for n := range 60 {
			wire.PeekDestQPN(b[:n]) // no panic on a short frame
		}
	}
	if _, ok := wire.PeekDestQPN([]byte{14: 0x45}); ok {
		t.Fatal("15-byte frame: PeekDestQPN ok")
	}
}
