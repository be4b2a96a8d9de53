package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/roce/wire"
)

// An OOO_WRITE is one self-describing packet of an operation: here the last
// of three (index 2, 256-byte segments, 528 bytes in all). A receiver that
// negotiated OOO mode decodes it with AcceptOOO; Decode alone refuses it.
func ExamplePacket_DecodeWith() {
	p := wire.Packet{
		SrcIP: netip.MustParseAddr("198.51.100.1"), DstIP: netip.MustParseAddr("198.51.100.2"),
		TTL: 64, IPFlags: wire.IPv4DontFragment, SrcPort: 0xC000, DstPort: wire.UDPPort,
		BTH:  wire.BTH{Opcode: wire.OOOWrite, PKey: wire.DefaultPKey, DestQPN: 0x12, PSN: 2},
		RETH: wire.RETH{VA: 0x7f0000001000 + 2*256, RKey: 0x1234, DMALen: 16},
		XRH: wire.XRH{Ctx: wire.MakeCtx(0x101, 3), TID: 7, Total: 528, Initiator: wire.MakeCtx(0x202, 5),
			Notify: wire.NotifyInitiator, Seg: wire.MTU256, Tag: 42},
		Payload: make([]byte, 16),
	}
	buf := make([]byte, 2048)
	n, err := p.Encode(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	var q wire.Packet
	fmt.Println(q.Decode(buf[:n]))
	if err := q.DecodeWith(buf[:n], wire.AcceptOOO); err != nil {
		fmt.Println(err)
		return
	}
	x := &q.XRH
	fmt.Printf("%v ctx %v tid %d: packet %d of %d at offset %d, %d bytes of %d\n",
		q.BTH.Opcode, x.Ctx, x.TID, q.BTH.PSN, x.Packets(), x.Offset(q.BTH.PSN), len(q.Payload), x.Total)
	// Output:
	// wire: decode bth: OOO opcode not accepted (OOO mode not negotiated): unknown opcode
	// OOO_WRITE ctx 0x000101/k3 tid 7: packet 2 of 3 at offset 512, 16 bytes of 528
}
