package wire_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdproce/xdproce/roce/wire"
)

// rxeACK is an RC ACKNOWLEDGE of testdata/rxe/rc_pingpong.pcap (192.0.2.11
// acknowledging PSN 0xc829ba of QP 0x11):
//
//	Ethernet  52:54:c0:00:02:0c <- 52:54:c0:00:02:0b, IPv4
//	IPv4      4500 0030 7ef3 4000 4011 37b2 c000020b c000020c   (DF, TTL 64)
//	UDP       c121 12b7 001c 0000                                (49441 -> 4791, checksum 0)
//	BTH       11 00 ffff 00000011 00c829ba                       (ACKNOWLEDGE, QP 0x11)
//	AETH      1f 000001                                          (ACK, unlimited credits, MSN 1)
//	ICRC      deff0b91                                           (little-endian)
const rxeACK = "5254c000020c5254c000020b0800450000307ef34000401137b2c000020bc000020cc12112b7001c0000" +
	"1100ffff0000001100c829ba1f000001deff0b91"

func ExamplePacket_Decode() {
	frame, _ := hex.DecodeString(rxeACK)
	var p wire.Packet
	if err := p.Decode(frame); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v:%d -> %v:%d\n", p.SrcIP, p.SrcPort, p.DstIP, p.DstPort)
	fmt.Printf("%v QP %#x PSN %#x, %v, ICRC %#08x\n", p.BTH.Opcode, p.BTH.DestQPN, p.BTH.PSN, p.AETH, p.ICRC)

	frame[len(frame)-10] ^= 1 // corrupt the PSN
	err := p.Decode(frame)
	fmt.Println(errors.Is(err, wire.ErrBadICRC), err)
	// Output:
	// 192.0.2.11:49441 -> 192.0.2.12:4791
	// RC_ACKNOWLEDGE QP 0x11 PSN 0xc829ba, ACK credits=31 msn=1, ICRC 0x910bffde
	// true wire: decode icrc: mismatch: bad ICRC
}

func ExamplePacket_Encode() {
	p := wire.Packet{
		SrcIP: netip.MustParseAddr("198.51.100.1"), DstIP: netip.MustParseAddr("198.51.100.2"),
		TTL: 64, IPFlags: wire.IPv4DontFragment,
		SrcPort: wire.SourcePort(0x11, 0x12), DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQPN: 0x12, AckReq: true, PSN: 100},
		RETH:    wire.RETH{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 5},
		Payload: []byte("hello"),
	}
	buf := make([]byte, 2048)
	n, err := p.Encode(buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("frame", n, "bytes: headers", p.HeaderLen(), "payload", len(p.Payload), "pad", p.BTH.PadCount, "ICRC 4")

	var q wire.Packet
	err = q.Decode(buf[:n])
	fmt.Printf("%v %q rkey %#x, err %v\n", q.BTH.Opcode, q.Payload, q.RETH.RKey, err)
	// Output:
	// frame 82 bytes: headers 70 payload 5 pad 3 ICRC 4
	// RC_RDMA_WRITE_ONLY "hello" rkey 0x1234, err <nil>
}

func ExampleSourcePort() {
	fmt.Println(wire.SourcePort(0x11, 0x11), wire.UDSourcePort(1))
	// Output: 49441 55410
}

func ExamplePSNDiff() {
	fmt.Println(wire.PSNDiff(2, 0xFFFFFE), wire.PSNBefore(0xFFFFFE, 2), wire.PSNAdd(0xFFFFFF, 1))
	// Output: 4 true 0
}

func ExamplePathMTU() {
	fmt.Println(wire.PathMTU(1500), wire.PathMTU(9000), wire.PathMTU(1500).Bytes())
	// Output: MTU1024 MTU4096 1024
}

// Example_gopacket decodes a frame with gopacket: importing wire registers
// UDP port 4791. The ICRC is checked on the whole frame.
func Example_gopacket() {
	frame, _ := hex.DecodeString(rxeACK)
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var names []string
	for _, l := range pkt.Layers() {
		names = append(names, l.LayerType().String())
	}
	fmt.Println(strings.Join(names, " "))
	bth := pkt.Layer(wire.LayerTypeBTH).(*wire.BTHLayer)
	aeth := pkt.Layer(wire.LayerTypeAETH).(*wire.AETHLayer)
	fmt.Println(bth.Opcode, bth.PSN, aeth.AETH, wire.VerifyICRC(pkt.Data()))
	// Output:
	// Ethernet IPv4 UDP BTH AETH
	// RC_ACKNOWLEDGE 13117882 ACK credits=31 msn=1 <nil>
}
