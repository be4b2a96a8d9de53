package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/xdproce/xdproce/roce/wire"
)

// refICRC computes the ICRC the slow, obvious way from ROCEV2.md: copy the
// IP packet, set the variant fields to ones, hash 8 x 0xFF plus everything up
// to the ICRC with crc32.ChecksumIEEE.
func refICRC(t testing.TB, frame []byte) uint32 {
	t.Helper()
	off := 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		off = 18
	}
	ip := frame[off:]
	var total, l4 int
	if ip[0]>>4 == 4 {
		total = int(binary.BigEndian.Uint16(ip[2:]))
		l4 = int(ip[0]&0xF) * 4
	} else {
		total = 40 + int(binary.BigEndian.Uint16(ip[4:]))
		l4 = 40
	}
	m := append(bytes.Repeat([]byte{0xFF}, 8), ip[:total-4]...)
	h := m[8:]
	if ip[0]>>4 == 4 {
		h[1], h[8], h[10], h[11] = 0xFF, 0xFF, 0xFF, 0xFF
	} else {
		h[0] |= 0x0F
		h[1], h[2], h[3], h[7] = 0xFF, 0xFF, 0xFF, 0xFF
	}
	h[l4+6], h[l4+7] = 0xFF, 0xFF
	h[l4+8+4] = 0xFF
	return crc32.ChecksumIEEE(m)
}

func TestICRCReference(t *testing.T) {
	for _, f := range rxeFrames(t) {
		want := binary.LittleEndian.Uint32(f.data[len(f.data)-4:])
		if got := refICRC(t, f.data); got != want {
			t.Fatalf("%v: reference ICRC %#x, stored %#x", f, got, want)
		}
	}
}

// payloadLens returns the payload lengths to try for an opcode: the
// boundaries of its rule and every pad count.
func payloadLens(info wire.OpInfo) []int {
	switch {
	case info.Kind == wire.KindCNP:
		return []int{16}
	case info.Transport == wire.SR:
		return []int{wire.SACKLen, 2 * wire.SACKLen, wire.SACKMaxLen}
	case !info.Payload:
		return []int{0}
	case info.Pos == wire.PosFirst || info.Pos == wire.PosMiddle:
		return []int{256, 1024, 4096}
	case info.Pos == wire.PosLast:
		return []int{1, 2, 3, 4, 5, 63, 4096}
	}
	return []int{0, 1, 2, 3, 4, 5, 6, 7, 1023, 4096}
}

// randomPacket fills every field the wire carries with random values.
func randomPacket(rng *rand.Rand, op wire.Opcode, v6, vlan bool, opts int, n int) wire.Packet {
	p := wire.Packet{
		HasVLAN: vlan,
		IPv6:    v6,
		TOS:     uint8(rng.Uint32()),
		TTL:     uint8(rng.Uint32()),
		SrcPort: uint16(rng.Uint32()),
		DstPort: wire.UDPPort,
		BTH: wire.BTH{
			Opcode: op, SE: rng.IntN(2) == 0, MigReq: rng.IntN(2) == 0, PKey: uint16(rng.Uint32()),
			FECN: rng.IntN(2) == 0, BECN: rng.IntN(2) == 0, Resv6: uint8(rng.IntN(64)),
			DestQPN: rng.Uint32() & wire.PSNMask, AckReq: rng.IntN(2) == 0, Resv7: uint8(rng.IntN(128)),
			PSN: rng.Uint32() & wire.PSNMask,
		},
		UDPChecksum: uint16(rng.Uint32()),
	}
	for i := range p.DstMAC {
		p.DstMAC[i], p.SrcMAC[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	if vlan {
		p.VLANTCI = uint16(rng.Uint32())
	}
	if v6 {
		var a, b [16]byte
		for i := range a {
			a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		p.SrcIP, p.DstIP = netip.AddrFrom16(a), netip.AddrFrom16(b)
		p.FlowLabel = rng.Uint32() & 0xFFFFF
	} else {
		p.SrcIP = netip.AddrFrom4([4]byte{198, 51, 100, byte(rng.Uint32())})
		p.DstIP = netip.AddrFrom4([4]byte{203, 0, 113, byte(rng.Uint32())})
		p.IPID = uint16(rng.Uint32())
		p.IPFlags = uint8(rng.IntN(4)) << 1 // reserved bit and DF; never MF
		if opts > 0 {
			p.IPOptions = make([]byte, opts)
			for i := range p.IPOptions {
				p.IPOptions[i] = byte(rng.Uint32())
			}
		}
	}
	info, _ := op.Info()
	if info.Headers&wire.HasRETH != 0 {
		p.RETH = wire.RETH{VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: rng.Uint32()}
	}
	if info.Headers&wire.HasAETH != 0 {
		p.AETH = wire.AETH{Syndrome: uint8(rng.Uint32()), MSN: rng.Uint32() & wire.PSNMask}
	}
	if info.Headers&wire.HasAtomicETH != 0 {
		p.Atomic = wire.AtomicETH{VA: rng.Uint64() &^ 7, RKey: rng.Uint32(), SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
	}
	if info.Headers&wire.HasAtomicAckETH != 0 {
		p.AtomicAck = wire.AtomicAckETH{Orig: rng.Uint64()}
	}
	if info.Headers&wire.HasDETH != 0 {
		p.DETH = wire.DETH{QKey: rng.Uint32(), Resv: uint8(rng.Uint32()), SrcQPN: rng.Uint32() & wire.PSNMask}
	}
	if info.Headers&wire.HasImmDt != 0 {
		p.ImmDt = rng.Uint32()
	}
	if info.Headers&wire.HasIETH != 0 {
		p.IETH = rng.Uint32()
	}
	p.Payload = make([]byte, n)
	for i := range p.Payload {
		p.Payload[i] = byte(rng.Uint32())
	}
	if info.Transport == wire.OOO {
		randomOOO(rng, &p, &info, n)
	}
	return p
}

// randomOOO fills the OOO headers of p with random values that keep the
// OOO rules: a data packet of n bytes is a whole segment or the last one,
// inside the operation; a READ request's total is its RETH length.
func randomOOO(rng *rand.Rand, p *wire.Packet, info *wire.OpInfo, n int) {
	p.XRH = wire.XRH{
		Ctx: wire.Ctx(rng.Uint32()), TID: rng.Uint32(), Total: rng.Uint32(), Initiator: wire.Ctx(rng.Uint32()),
		Notify: wire.Notify(rng.Uint32()), Seg: wire.MTU(1 + rng.IntN(5)), Resv: uint16(rng.Uint32()), Tag: rng.Uint32(),
	}
	switch info.Kind {
	case wire.KindWrite, wire.KindSend:
		for p.XRH.Seg.Bytes() < n {
			p.XRH.Seg++
		}
		seg := uint32(p.XRH.Seg.Bytes())
		p.BTH.PSN = uint32(rng.IntN(1000))
		if info.Headers&wire.HasRETH != 0 {
			p.RETH.DMALen = uint32(n)
		}
		p.XRH.Total = p.BTH.PSN*seg + uint32(n) // the last packet
		if uint32(n) == seg && rng.IntN(2) == 0 {
			p.XRH.Total += uint32(rng.IntN(1 << 20)) // one in the middle
		}
	case wire.KindReadRequest:
		if info.Headers&wire.HasRETH != 0 {
			p.XRH.Total = p.RETH.DMALen
		}
	}
	if info.Headers&wire.HasXRR != 0 {
		p.XRR = wire.XRR{VA: rng.Uint64(), RKey: rng.Uint32()}
	}
	if info.Headers&wire.HasXCS != 0 {
		p.XCS = wire.XCS{Status: uint8(rng.Uint32()), Resv: rng.Uint32() & wire.PSNMask}
	}
	for _, x := range []*wire.XTP{&p.XTPTarget, &p.XTPController} {
		if x == &p.XTPTarget && info.Headers&wire.HasXTPTarget == 0 || x == &p.XTPController && info.Headers&wire.HasXTPController == 0 {
			continue
		}
		for i := range x.GID {
			x.GID[i] = byte(rng.Uint32())
		}
		x.Resv, x.QPN, x.Ctx = uint8(rng.Uint32()), rng.Uint32()&wire.PSNMask, wire.Ctx(rng.Uint32())
	}
}

// TestRoundTrip encodes every opcode over IPv4 (with and without options)
// and IPv6, with and without a VLAN tag, with payloads of every pad count,
// decodes the frame and compares every field.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000)
	inplace := make([]byte, 9000)
	frames := 0
	for _, op := range wire.Opcodes() {
		info, _ := op.Info()
		for _, l3 := range []struct {
			v6   bool
			opts int
		}{{false, 0}, {false, 4}, {false, 40}, {true, 0}} {
			for _, vlan := range []bool{false, true} {
				for _, n := range payloadLens(info) {
					want := randomPacket(rng, op, l3.v6, vlan, l3.opts, n)
					for i := range buf {
						buf[i] = 0xA5
					}
					fl, err := want.Encode(buf)
					if err != nil {
						t.Fatalf("%v v6=%v vlan=%v n=%d: Encode: %v", op, l3.v6, vlan, n, err)
					}
					frame := buf[:fl]
					frames++
					if fl != want.FrameLen() || want.BTH.PadCount != uint8((4-n%4)%4) {
						t.Fatalf("%v: length %d (FrameLen %d), pad %d for payload %d", op, fl, want.FrameLen(), want.BTH.PadCount, n)
					}
					if got := refICRC(t, frame); got != want.ICRC || got != binary.LittleEndian.Uint32(frame[fl-4:]) {
						t.Fatalf("%v: ICRC %#x, reference %#x", op, want.ICRC, got)
					}
					var got wire.Packet
					if err := got.DecodeWith(frame, wire.AcceptOOO|wire.AcceptSR); err != nil {
						t.Fatalf("%v v6=%v vlan=%v opts=%d n=%d: Decode: %v\n%x", op, l3.v6, vlan, l3.opts, n, err, frame)
					}
					if !bytes.Equal(want.Payload, got.Payload) {
						t.Fatalf("%v v6=%v vlan=%v n=%d: payload differs", op, l3.v6, vlan, n)
					}
					if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(wire.Packet{}, "Payload"),
						cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
						t.Fatalf("%v v6=%v vlan=%v n=%d: (-want +got):\n%s", op, l3.v6, vlan, n, diff)
					}
					if got.HeaderLen() != fl-n-int(got.BTH.PadCount)-4 {
						t.Fatalf("%v: HeaderLen %d", op, got.HeaderLen())
					}
					// EncodeInPlace from the payload already in place
					// gives the same frame.
					hl := want.HeaderLen()
					copy(inplace[hl:], want.Payload)
					fl2, err := want.EncodeInPlace(inplace, n)
					if err != nil || !bytes.Equal(inplace[:fl2], frame) {
						t.Fatalf("%v: EncodeInPlace = %d, %v; differs from Encode", op, fl2, err)
					}
				}
			}
		}
	}
	t.Logf("%d frames", frames)
}

func TestEncodeErrors(t *testing.T) {
	ok := wire.Packet{
		SrcIP: netip.MustParseAddr("198.51.100.1"), DstIP: netip.MustParseAddr("198.51.100.2"),
		DstPort: wire.UDPPort, BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey},
		Payload: make([]byte, 10),
	}
	buf := make([]byte, 9000)
	if _, err := ok.Encode(buf); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mod  func(p *wire.Packet)
		buf  int
		want error
	}{
		{"unknown opcode", func(p *wire.Packet) { p.BTH.Opcode = 0x15 }, 0, wire.ErrUnknownOpcode},
		{"TVer", func(p *wire.Packet) { p.BTH.TVer = 1 }, 0, wire.ErrBadVersion},
		{"QPN", func(p *wire.Packet) { p.BTH.DestQPN = 1 << 24 }, 0, wire.ErrBadField},
		{"PSN", func(p *wire.Packet) { p.BTH.PSN = 1 << 24 }, 0, wire.ErrBadField},
		{"Resv6", func(p *wire.Packet) { p.BTH.Resv6 = 64 }, 0, wire.ErrBadField},
		{"MSN", func(p *wire.Packet) { p.AETH.MSN = 1 << 24 }, 0, wire.ErrBadField},
		{"v6 addr in v4", func(p *wire.Packet) { p.DstIP = netip.MustParseAddr("2001:db8::1") }, 0, wire.ErrBadField},
		{"v4 addr in v6", func(p *wire.Packet) { p.IPv6 = true }, 0, wire.ErrBadField},
		{"no addr", func(p *wire.Packet) { p.SrcIP = netip.Addr{} }, 0, wire.ErrBadField},
		{"MF", func(p *wire.Packet) { p.IPFlags = wire.IPv4MoreFragments }, 0, wire.ErrBadField},
		{"options", func(p *wire.Packet) { p.IPOptions = []byte{1, 2, 3} }, 0, wire.ErrBadField},
		{"ACK payload", func(p *wire.Packet) { p.BTH.Opcode = wire.RCAck }, 0, wire.ErrBadLength},
		{"FIRST 10", func(p *wire.Packet) { p.BTH.Opcode = wire.RCSendFirst }, 0, wire.ErrBadLength},
		{"LAST 0", func(p *wire.Packet) { p.BTH.Opcode = wire.RCWriteLast; p.Payload = nil }, 0, wire.ErrBadLength},
		{"too long", func(p *wire.Packet) { p.Payload = make([]byte, 4097) }, 0, wire.ErrBadLength},
		{"CNP", func(p *wire.Packet) { p.BTH.Opcode = wire.CNP }, 0, wire.ErrBadLength},
		{"short buffer", func(p *wire.Packet) {}, ok.FrameLen() - 1, wire.ErrShortBuffer},
	} {
		p := ok
		c.mod(&p)
		b := buf
		if c.buf > 0 {
			b = buf[:c.buf]
		}
		_, err := p.Encode(b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Encode = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := ok.EncodeInPlace(buf, -1); !errors.Is(err, wire.ErrBadLength) {
		t.Errorf("EncodeInPlace(-1) = %v", err)
	}
}
