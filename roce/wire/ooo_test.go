package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xdproce/xdproce/roce/wire"
)

// oooOpcodes are the OOO opcodes, restated from docs/ooo-wire.md.
var oooOpcodes = []wire.Opcode{0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7}

// hexBytes decodes hex written with spaces and | separators.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wrapIPv4 puts a UDP payload (BTH through the ICRC slot) behind Ethernet,
// IPv4 (DF, TTL 64, ID 0) and UDP headers written by hand, from
// 198.51.100.1:49441 to 198.51.100.2:4791, then fills in the IPv4 checksum
// and the ICRC.
func wrapIPv4(t testing.TB, transport []byte) []byte {
	t.Helper()
	b := hexBytes(t, `02000000000b 02000000000a 0800
		4500 0000 0000 4000 4011 0000 c6336401 c6336402
		c121 12b7 0000 0000`)
	b = append(b, transport...)
	binary.BigEndian.PutUint16(b[14+2:], uint16(20+8+len(transport)))
	binary.BigEndian.PutUint16(b[14+20+4:], uint16(8+len(transport)))
	binary.BigEndian.PutUint16(b[14+10:], wire.IPv4Checksum(b[14:34]))
	if err := wire.SetICRC(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// The packets of TestOOOHandBuilt, field by field. The bytes are written
// from docs/ooo-wire.md, not by the encoder, so they pin the layout.
var oooHand = []struct {
	name string
	hex  string // BTH through payload; the ICRC slot is added
	want wire.Packet
}{
	{
		name: "OOO_WRITE",
		hex: `c0 00 ffff | 00 000012 | 00 000002
			00007f3a5c001a00 | 5ac3e1d7 | 00000010
			000101 03 | 00000007 | 00000210 | 000202 05 | 01 | 01 | 0000 | deadbeef
			000102030405060708090a0b0c0d0e0f`,
		want: wire.Packet{
			BTH:  wire.BTH{Opcode: wire.OOOWrite, PKey: 0xFFFF, DestQPN: 0x12, PSN: 2},
			RETH: wire.RETH{VA: 0x7f3a5c001a00, RKey: 0x5ac3e1d7, DMALen: 16},
			XRH: wire.XRH{Ctx: wire.MakeCtx(0x000101, 3), TID: 7, Total: 2*256 + 16, Initiator: wire.MakeCtx(0x000202, 5),
				Notify: wire.NotifyInitiator, Seg: wire.MTU256, Tag: 0xdeadbeef},
			Payload: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		},
	},
	{
		name: "OOO_READ_REQ",
		hex: `c1 00 ffff | 00 000012 | 00 000000
			00007f3a5c002000 | 11223344 | 00001000
			000103 07 | 00000009 | 00001000 | 000204 02 | 0b | 03 | 0000 | 0000abcd
			00007f0000100000 | 55667788`,
		want: wire.Packet{
			BTH:  wire.BTH{Opcode: wire.OOOReadReq, PKey: 0xFFFF, DestQPN: 0x12},
			RETH: wire.RETH{VA: 0x7f3a5c002000, RKey: 0x11223344, DMALen: 4096},
			XRH: wire.XRH{Ctx: wire.MakeCtx(0x000103, 7), TID: 9, Total: 4096, Initiator: wire.MakeCtx(0x000204, 2),
				Notify: wire.NotifyBoth | wire.NotifyToSelf, Seg: wire.MTU1024, Tag: 0xabcd},
			XRR: wire.XRR{VA: 0x7f0000100000, RKey: 0x55667788},
		},
	},
	{
		name: "OOO_COMPLETION",
		hex: `c2 00 ffff | 00 000011 | 00 000000
			000202 05 | 00000007 | 00000210 | 000101 03 | 01 | 00 | 0000 | deadbeef
			00 000000`,
		want: wire.Packet{
			BTH: wire.BTH{Opcode: wire.OOOCompletion, PKey: 0xFFFF, DestQPN: 0x11},
			XRH: wire.XRH{Ctx: wire.MakeCtx(0x000202, 5), TID: 7, Total: 528, Initiator: wire.MakeCtx(0x000101, 3),
				Notify: wire.NotifyInitiator, Tag: 0xdeadbeef},
			XCS: wire.XCS{Status: wire.XCSSuccess},
		},
	},
	{
		name: "OOO_3P_READ_REQ",
		hex: `c3 00 ffff | 00 000013 | 00 000000
			0000000000001000 | 0000aaaa | 00000300
			000105 01 | 00000001 | 00000300 | 000301 09 | 01 | 02 | 0000 | 00000042
			0000000000009000 | 0000bbbb
			00000000000000000000ffffc6336403 | 00 000014 | 000401 04
			00000000000000000000ffffc6336401 | 00 000015 | 000301 09`,
		want: wire.Packet{
			BTH:  wire.BTH{Opcode: wire.OOO3PReadReq, PKey: 0xFFFF, DestQPN: 0x13},
			RETH: wire.RETH{VA: 0x1000, RKey: 0xaaaa, DMALen: 0x300},
			XRH: wire.XRH{Ctx: wire.MakeCtx(0x000105, 1), TID: 1, Total: 0x300, Initiator: wire.MakeCtx(0x000301, 9),
				Notify: wire.NotifyInitiator, Seg: wire.MTU512, Tag: 0x42},
			XRR: wire.XRR{VA: 0x9000, RKey: 0xbbbb},
			XTPTarget: wire.XTP{GID: netip.MustParseAddr("::ffff:198.51.100.3").As16(), QPN: 0x14,
				Ctx: wire.MakeCtx(0x000401, 4)},
			XTPController: wire.XTP{GID: netip.MustParseAddr("::ffff:198.51.100.1").As16(), QPN: 0x15,
				Ctx: wire.MakeCtx(0x000301, 9)},
		},
	},
	{
		name: "OOO_3P_WRITE",
		hex: `c4 00 ffff | 00 000014 | 00 000001
			0000000000009200 | 0000bbbb | 00000100
			000401 04 | 00000001 | 00000300 | 000105 01 | 01 | 01 | 0000 | 00000042
			00000000000000000000ffffc6336401 | 00 000015 | 000301 09` + "\n" + hexPayload256,
		want: wire.Packet{
			BTH:  wire.BTH{Opcode: wire.OOO3PWrite, PKey: 0xFFFF, DestQPN: 0x14, PSN: 1},
			RETH: wire.RETH{VA: 0x9200, RKey: 0xbbbb, DMALen: 256},
			XRH: wire.XRH{Ctx: wire.MakeCtx(0x000401, 4), TID: 1, Total: 0x300, Initiator: wire.MakeCtx(0x000105, 1),
				Notify: wire.NotifyInitiator, Seg: wire.MTU256, Tag: 0x42},
			XTPController: wire.XTP{GID: netip.MustParseAddr("::ffff:198.51.100.1").As16(), QPN: 0x15,
				Ctx: wire.MakeCtx(0x000301, 9)},
			Payload: bytes.Repeat([]byte{0x5a}, 256),
		},
	},
}

var hexPayload256 = strings.Repeat("5a", 256)

// TestOOOHandBuilt decodes frames whose OOO headers were written byte by
// byte and compares every field; encodes the expected packets and compares
// the bytes; and checks that Decode without AcceptOOO refuses each one as an
// unknown opcode.
func TestOOOHandBuilt(t *testing.T) {
	for _, c := range oooHand {
		t.Run(c.name, func(t *testing.T) {
			transport := append(hexBytes(t, c.hex), 0, 0, 0, 0)
			frame := wrapIPv4(t, transport)
			var p wire.Packet
			if err := p.DecodeWith(frame, wire.AcceptOOO); err != nil {
				t.Fatalf("DecodeWith(AcceptOOO): %v\n%x", err, frame)
			}
			if p.BTH.Opcode.String() != c.name {
				t.Errorf("opcode %v, want %s", p.BTH.Opcode, c.name)
			}
			want := c.want
			want.DstMAC, want.SrcMAC = [6]byte{2, 0, 0, 0, 0, 0x0b}, [6]byte{2, 0, 0, 0, 0, 0x0a}
			want.SrcIP, want.DstIP = netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
			want.TTL, want.IPFlags, want.SrcPort, want.DstPort = 64, wire.IPv4DontFragment, 49441, wire.UDPPort
			want.ICRC = binary.LittleEndian.Uint32(frame[len(frame)-4:])
			if diff := cmp.Diff(want, p, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			info, _ := p.BTH.Opcode.Info()
			if p.HeaderLen() != 14+20+8+info.HdrLen || len(transport) != info.HdrLen+len(want.Payload)+4 {
				t.Errorf("HeaderLen %d, HdrLen %d, %d transport bytes", p.HeaderLen(), info.HdrLen, len(transport))
			}
			// The encoder writes the same bytes.
			buf := make([]byte, 2048)
			n, err := want.Encode(buf)
			if err != nil || !bytes.Equal(buf[:n], frame) {
				t.Errorf("Encode = %d, %v\n got %x\nwant %x", n, err, buf[:n], frame)
			}
			// Not negotiated: unknown, as any vendor opcode, from both decoders.
			var q wire.Packet
			if err := q.Decode(frame); !errors.Is(err, wire.ErrUnknownOpcode) {
				t.Errorf("Decode = %v, want ErrUnknownOpcode", err)
			}
			if err := q.DecodeWritable(bytes.Clone(frame)); !errors.Is(err, wire.ErrUnknownOpcode) {
				t.Errorf("DecodeWritable = %v, want ErrUnknownOpcode", err)
			}
			if err := q.DecodeWith(bytes.Clone(frame), wire.AcceptOOO|wire.InPlace); err != nil {
				t.Errorf("DecodeWith(AcceptOOO|InPlace) = %v", err)
			}
		})
	}
}

// oooFrame encodes one valid frame of op (a data packet of n bytes).
func oooFrame(t testing.TB, rng *rand.Rand, op wire.Opcode, v6 bool, n int) (wire.Packet, []byte) {
	t.Helper()
	p := randomPacket(rng, op, v6, false, 0, n)
	b := make([]byte, p.FrameLen())
	if _, err := p.Encode(b); err != nil {
		t.Fatalf("%v: %v", op, err)
	}
	return p, b
}

// TestOOORules: the consistency rules of the OOO opcodes, on Encode and on
// Decode (of frames encoded valid, then patched and re-checksummed).
func TestOOORules(t *testing.T) {
	base := oooHand[0].want // OOO_WRITE, idx 2 of a 528-byte operation in 256-byte segments
	base.SrcIP, base.DstIP, base.DstPort = netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), wire.UDPPort
	read := oooHand[1].want
	read.SrcIP, read.DstIP, read.DstPort = base.SrcIP, base.DstIP, wire.UDPPort
	buf := make([]byte, 9000)
	for _, c := range []struct {
		name string
		p    wire.Packet
		mod  func(p *wire.Packet)
		want error
	}{
		{"valid write", base, func(p *wire.Packet) {}, nil},
		{"DMALen differs", base, func(p *wire.Packet) { p.RETH.DMALen = 17 }, wire.ErrBadLength},
		{"no segment", base, func(p *wire.Packet) { p.XRH.Seg = 0 }, wire.ErrBadLength},
		{"segment 6", base, func(p *wire.Packet) { p.XRH.Seg = 6 }, wire.ErrBadLength},
		{"past the total", base, func(p *wire.Packet) { p.XRH.Total = 2*256 + 15 }, wire.ErrBadLength},
		{"short, not last", base, func(p *wire.Packet) { p.XRH.Total = 4096 }, wire.ErrBadLength},
		{"idx past the end", base, func(p *wire.Packet) { p.BTH.PSN = 3 }, wire.ErrBadLength},
		{"whole middle segment", base, func(p *wire.Packet) {
			p.Payload = make([]byte, 256)
			p.RETH.DMALen = 256
			p.XRH.Total = 4096
		}, nil},
		{"longer than the segment", base, func(p *wire.Packet) {
			p.Payload = make([]byte, 300)
			p.RETH.DMALen = 300
			p.BTH.PSN = 0
			p.XRH.Total = 300
		}, wire.ErrBadLength},
		{"empty operation", base, func(p *wire.Packet) {
			p.Payload, p.RETH.DMALen, p.BTH.PSN, p.XRH.Total = nil, 0, 0, 0
		}, nil},
		{"empty packet of a non-empty operation", base, func(p *wire.Packet) { p.Payload, p.RETH.DMALen = nil, 0 }, wire.ErrBadLength},
		{"huge index", base, func(p *wire.Packet) { p.BTH.PSN = wire.PSNMask; p.XRH.Seg = wire.MTU4096 }, wire.ErrBadLength},
		{"valid read", read, func(p *wire.Packet) {}, nil},
		{"read total differs", read, func(p *wire.Packet) { p.XRH.Total++ }, wire.ErrBadLength},
		{"read no segment", read, func(p *wire.Packet) { p.XRH.Seg = 0 }, wire.ErrBadLength},
		{"read payload", read, func(p *wire.Packet) { p.Payload = []byte{1} }, wire.ErrBadLength},
	} {
		p := c.p
		p.Payload = bytes.Clone(p.Payload)
		c.mod(&p)
		_, err := p.Encode(buf)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Encode = %v, want %v", c.name, err, c.want)
		}
		// The same packet built without the encoder's checks (encoded valid,
		// then patched) gets the same verdict from Decode.
		valid := c.p
		n, err := valid.Encode(buf)
		if err != nil {
			t.Fatal(err)
		}
		frame := patchOOO(t, bytes.Clone(buf[:n]), &p)
		var q wire.Packet
		if err := q.DecodeWith(frame, wire.AcceptOOO); !errors.Is(err, c.want) {
			t.Errorf("%s: Decode = %v, want %v", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		mod  func(p *wire.Packet)
	}{
		{"XTP target QPN", func(p *wire.Packet) { p.XTPTarget.QPN = 1 << 24 }},
		{"XTP controller QPN", func(p *wire.Packet) { p.XTPController.QPN = 1 << 24 }},
		{"XCS reserved", func(p *wire.Packet) { p.BTH.Opcode = wire.OOOCompletion; p.Payload = nil; p.XCS.Resv = 1 << 24 }},
	} {
		p := oooHand[3].want
		p.SrcIP, p.DstIP = base.SrcIP, base.DstIP
		c.mod(&p)
		if _, err := p.Encode(buf); !errors.Is(err, wire.ErrBadField) {
			t.Errorf("%s: Encode = %v, want ErrBadField", c.name, err)
		}
	}
}

// patchOOO rewrites the BTH PSN, the RETH, the XRH and the payload of an
// encoded IPv4 OOO frame from p (the payload may change length), and fixes
// the lengths, the IPv4 checksum and the ICRC, bypassing Encode's checks.
func patchOOO(t *testing.T, frame []byte, p *wire.Packet) []byte {
	t.Helper()
	const bth = 14 + 20 + 8
	binary.BigEndian.PutUint32(frame[bth+8:], p.BTH.PSN)
	info, _ := p.BTH.Opcode.Info()
	h := frame[bth+12:]
	if info.Headers&wire.HasRETH != 0 {
		binary.BigEndian.PutUint64(h, p.RETH.VA)
		binary.BigEndian.PutUint32(h[8:], p.RETH.RKey)
		binary.BigEndian.PutUint32(h[12:], p.RETH.DMALen)
		h = h[16:]
	}
	binary.BigEndian.PutUint32(h, uint32(p.XRH.Ctx))
	binary.BigEndian.PutUint32(h[4:], p.XRH.TID)
	binary.BigEndian.PutUint32(h[8:], p.XRH.Total)
	binary.BigEndian.PutUint32(h[12:], uint32(p.XRH.Initiator))
	h[16], h[17] = byte(p.XRH.Notify), byte(p.XRH.Seg)
	binary.BigEndian.PutUint32(h[20:], p.XRH.Tag)
	n := len(p.Payload)
	pad := (-n) & 3
	out := append(frame[:bth+info.HdrLen:bth+info.HdrLen], p.Payload...)
	out = append(out, make([]byte, pad+4)...)
	out[bth+1] = out[bth+1]&^0x30 | byte(pad)<<4
	binary.BigEndian.PutUint16(out[14+2:], uint16(len(out)-14))
	binary.BigEndian.PutUint16(out[14+20+4:], uint16(len(out)-14-20))
	binary.BigEndian.PutUint16(out[14+10:], 0)
	binary.BigEndian.PutUint16(out[14+10:], wire.IPv4Checksum(out[14:34]))
	if err := wire.SetICRC(out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOOOHelpers(t *testing.T) {
	if wire.KindCompletion.String() != "COMPLETION" || wire.OOO.String() != "OOO" || (wire.Kind(12)).String() != "Kind(12)" {
		t.Errorf("names: %v %v %v", wire.KindCompletion, wire.OOO, wire.Kind(12))
	}
	c := wire.MakeCtx(0x000101, 3)
	if c != 0x00010103 || c.ID() != 0x101 || c.Key() != 3 || c.String() != "0x000101/k3" {
		t.Errorf("MakeCtx(0x101, 3) = %#x, ID %#x, key %d, %q", uint32(c), c.ID(), c.Key(), c.String())
	}
	if c := wire.MakeCtx(0x1ABCDEF, 255); c.ID() != 0xABCDEF || c.String() != "0xabcdef/k255" {
		t.Errorf("MakeCtx drops the high bits: %#x %q", uint32(c), c.String())
	}
	for n, want := range map[wire.Notify]string{
		wire.NotifyNone: "none", wire.NotifyInitiator: "initiator", wire.NotifyTarget: "target",
		wire.NotifyBoth: "both", wire.NotifyTarget | wire.NotifyToSelf: "target+self", 0x41: "initiator+0x40",
	} {
		if n.String() != want {
			t.Errorf("Notify(%#x) = %q, want %q", uint8(n), n.String(), want)
		}
	}
	if !(wire.NotifyBoth | wire.NotifyToSelf).ToSelf() || (wire.NotifyBoth|wire.NotifyToSelf).Who() != wire.NotifyBoth {
		t.Error("Notify bits")
	}
	for _, c := range []struct {
		seg          wire.MTU
		total        uint32
		idx          uint32
		off          uint64
		packets      uint32
		lastPktBytes int
	}{
		{wire.MTU256, 528, 2, 512, 3, 16},
		{wire.MTU1024, 4096, 3, 3072, 4, 1024},
		{wire.MTU4096, 0, 0, 0, 1, 0},
		{wire.MTU4096, 1<<32 - 1, 1<<20 - 1, (1<<20 - 1) * 4096, 1 << 20, 4095},
		{0, 100, 1, 0, 0, 0},
	} {
		h := wire.XRH{Seg: c.seg, Total: c.total}
		if h.Offset(c.idx) != c.off || h.Packets() != c.packets {
			t.Errorf("%v total %d: Offset(%d) = %d, Packets %d; want %d, %d", c.seg, c.total, c.idx, h.Offset(c.idx), h.Packets(), c.off, c.packets)
		}
	}
}

// TestGopacketOOO: gopacket.NewPacket shows each OOO header as its own layer
// with the fields Decode finds, SerializePacket reproduces the frame, and a
// self-contained BTH layer serialises the OOO headers from its fields.
func TestGopacketOOO(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, op := range oooOpcodes {
		info, _ := op.Info()
		for _, v6 := range []bool{false, true} {
			for _, n := range payloadLens(info) {
				_, frame := oooFrame(t, rng, op, v6, n)
				var p wire.Packet
				if err := p.DecodeWith(frame, wire.AcceptOOO); err != nil {
					t.Fatalf("%v: %v", op, err)
				}
				pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
				if el := pkt.ErrorLayer(); el != nil {
					t.Fatalf("%v: error layer: %v", op, el.Error())
				}
				if diff := cmp.Diff(wantLayers(&p), layerTypes(pkt)); diff != "" {
					t.Errorf("%v: layers (-want +got):\n%s", op, diff)
				}
				bth := pkt.Layer(wire.LayerTypeBTH).(*wire.BTHLayer)
				if bth.BTH != p.BTH || bth.RETH != p.RETH || bth.XRH != p.XRH || bth.XRR != p.XRR || bth.XCS != p.XCS ||
					bth.XTPTarget != p.XTPTarget || bth.XTPController != p.XTPController || !bytes.Equal(bth.Payload, p.Payload) {
					t.Errorf("%v: BTH layer %+v disagrees with Decode %+v", op, bth, p)
				}
				if l, ok := pkt.Layer(wire.LayerTypeXRH).(*wire.XRHLayer); !ok || l.XRH != p.XRH {
					t.Errorf("%v: XRH layer %v, want %+v", op, l, p.XRH)
				}
				if l, ok := pkt.Layer(wire.LayerTypeXRR).(*wire.XRRLayer); ok != (info.Headers&wire.HasXRR != 0) || ok && l.XRR != p.XRR {
					t.Errorf("%v: XRR layer %v, want %+v", op, l, p.XRR)
				}
				if l, ok := pkt.Layer(wire.LayerTypeXCS).(*wire.XCSLayer); ok != (info.Headers&wire.HasXCS != 0) || ok && l.XCS != p.XCS {
					t.Errorf("%v: XCS layer %v, want %+v", op, l, p.XCS)
				}
				if l, ok := pkt.Layer(wire.LayerTypeXTPTarget).(*wire.XTPTargetLayer); ok != (info.Headers&wire.HasXTPTarget != 0) || ok && l.XTP != p.XTPTarget {
					t.Errorf("%v: XTP target layer %v, want %+v", op, l, p.XTPTarget)
				}
				if l, ok := pkt.Layer(wire.LayerTypeXTPController).(*wire.XTPControllerLayer); ok != (info.Headers&wire.HasXTPController != 0) || ok && l.XTP != p.XTPController {
					t.Errorf("%v: XTP controller layer %v, want %+v", op, l, p.XTPController)
				}
				sb := gopacket.NewSerializeBuffer()
				if err := gopacket.SerializePacket(sb, gopacket.SerializeOptions{}, pkt); err != nil || !bytes.Equal(sb.Bytes(), frame) {
					t.Errorf("%v: SerializePacket = %v\n got %x\nwant %x", op, err, sb.Bytes(), frame)
				}
				self := *bth
				self.SeparateExtensions = false
				ls := []gopacket.SerializableLayer{&self}
				if len(self.Payload) > 0 {
					ls = append(ls, gopacket.Payload(self.Payload))
				}
				sb = gopacket.NewSerializeBuffer()
				udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{}, ls...); err != nil || !bytes.Equal(sb.Bytes(), udp.Payload) {
					t.Errorf("%v: self-contained BTH layer = %v\n got %x\nwant %x", op, err, sb.Bytes(), udp.Payload)
				}
			}
		}
	}
	// Each OOO layer alone: a short buffer is truncation, not a panic.
	for _, l := range []gopacket.DecodingLayer{&wire.XRHLayer{}, &wire.XRRLayer{}, &wire.XCSLayer{}, &wire.XTPTargetLayer{}, &wire.XTPControllerLayer{}} {
		if err := l.DecodeFromBytes(make([]byte, 3), gopacket.NilDecodeFeedback); !errors.Is(err, wire.ErrTruncated) {
			t.Errorf("%T on 3 bytes: %v", l, err)
		}
	}
}
