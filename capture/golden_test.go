package capture

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/roce/wire"
)

var update = flag.Bool("update", false, "regenerate testdata/pcaps (golden captures and their dumps) and testdata/malformed")

const (
	goldenDir    = "../testdata/pcaps"
	malformedDir = "../testdata/malformed"
)

// goldenFrame is one frame of a golden capture: the packet as the wire
// encoder builds it, and its direction as seen from host A (the requester).
type goldenFrame struct {
	dir Direction
	pkt wire.Packet
}

type goldenFile struct {
	name   string // file name without extension
	ifc    Interface
	frames []goldenFrame
}

// endpoint is one side of a golden conversation.
type endpoint struct {
	mac [6]byte
	ip  netip.Addr
	qpn uint32
}

var (
	hostA  = endpoint{[6]byte{0x02, 0, 0, 0, 0, 0x0a}, netip.MustParseAddr("198.51.100.1"), 0x11}
	hostB  = endpoint{[6]byte{0x02, 0, 0, 0, 0, 0x0b}, netip.MustParseAddr("198.51.100.2"), 0x12}
	hostA6 = endpoint{hostA.mac, netip.MustParseAddr("2001:db8::a"), 0x11}
	hostB6 = endpoint{hostB.mac, netip.MustParseAddr("2001:db8::b"), 0x12}
)

// payload returns n deterministic bytes.
func payload(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*37 + i*7)
	}
	return b
}

// gen builds the frames of one golden conversation from A to B; from A is
// outbound, from B inbound.
type gen struct {
	frames []goldenFrame
	ipID   uint16
	v6     bool
	vlan   bool
	ud     bool
}

// add appends a packet from src to dst with opcode op and PSN psn; set fills
// in the rest.
func (g *gen) add(src, dst endpoint, op wire.Opcode, psn uint32, set func(p *wire.Packet)) {
	p := wire.Packet{
		SrcMAC: src.mac, DstMAC: dst.mac,
		SrcIP: src.ip, DstIP: dst.ip,
		IPv6: g.v6, TTL: 64, IPFlags: wire.IPv4DontFragment, IPID: g.ipID,
		DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: op, PKey: 0xFFFF, DestQPN: dst.qpn, PSN: psn},
	}
	g.ipID++
	if g.v6 {
		p.IPFlags, p.IPID = 0, 0
		p.FlowLabel = wire.FlowLabel(src.qpn, dst.qpn)
		p.SrcPort = wire.SourcePortFromFlowLabel(p.FlowLabel)
	} else {
		p.SrcPort = wire.SourcePort(src.qpn, dst.qpn)
	}
	if g.ud {
		p.SrcPort = wire.UDSourcePort(src.qpn)
	}
	if g.vlan {
		p.HasVLAN, p.VLANTCI = true, 3<<13|100 // PCP 3, VLAN 100
	}
	if info, _ := op.Info(); info.Pos == wire.PosLast || info.Pos == wire.PosOnly {
		p.BTH.AckReq = info.Request && info.Transport == wire.RC
	}
	if set != nil {
		set(&p)
	}
	if g.v6 {
		setUDP6Checksum(&p)
	}
	dir := DirOutbound
	if src == hostB || src == hostB6 {
		dir = DirInbound
	}
	g.frames = append(g.frames, goldenFrame{dir, p})
}

// setUDP6Checksum gives an IPv6 packet a real UDP checksum: RFC 8200 forbids
// 0 over IPv6 and tshark flags it as an error. (The ICRC masks the UDP
// checksum, so it does not change.)
func setUDP6Checksum(p *wire.Packet) {
	buf := make([]byte, 9000)
	p.UDPChecksum = 0
	n, err := p.Encode(buf)
	if err != nil {
		return // encodeGolden reports it
	}
	off := 14 + 40 // Ethernet, IPv6
	if p.HasVLAN {
		off += 4
	}
	l4 := buf[off:n]
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	src, dst := p.SrcIP.As16(), p.DstIP.As16()
	add(src[:])
	add(dst[:])
	sum += uint32(len(l4)) + 17
	add(l4)
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xFFFF
	}
	p.UDPChecksum = c
}

func withPayload(n, seed int) func(*wire.Packet) {
	return func(p *wire.Packet) { p.Payload = payload(n, seed) }
}

func ack(msn uint32, syndrome uint8) func(*wire.Packet) {
	return func(p *wire.Packet) { p.AETH = wire.AETH{Syndrome: syndrome, MSN: msn} }
}

const (
	goldenVA   = 0x00007f3a5c001000
	goldenRKey = 0x5ac3e1d7
	pmtu       = 256 // FIRST/MIDDLE payload: the smallest path MTU keeps the files small
)

func reth(va uint64, n uint32) wire.RETH { return wire.RETH{VA: va, RKey: goldenRKey, DMALen: n} }

// goldenFiles is the deterministic set of golden captures: every RC opcode,
// UD and UC sends, IPv6, an 802.1Q tag and a CNP.
func goldenFiles() []goldenFile {
	a, b := hostA, hostB
	unl := wire.ACKSyndrome(wire.UnlimitedCredits)
	var files []goldenFile
	file := func(name string, g *gen) {
		files = append(files, goldenFile{name: name, ifc: Interface{Name: "veth-a", Description: "xdproce golden capture: " + name}, frames: g.frames})
	}

	var g gen
	g.add(a, b, wire.RCSendFirst, 100, withPayload(pmtu, 1))
	g.add(a, b, wire.RCSendMiddle, 101, withPayload(pmtu, 2))
	g.add(a, b, wire.RCSendLast, 102, withPayload(100, 3))
	g.add(b, a, wire.RCAck, 102, ack(1, unl))
	g.add(a, b, wire.RCSendOnly, 103, withPayload(64, 4))
	g.add(a, b, wire.RCSendOnlyImm, 104, func(p *wire.Packet) { p.Payload = payload(13, 5); p.ImmDt = 0x12345678 })
	g.add(a, b, wire.RCSendFirst, 105, withPayload(pmtu, 6))
	g.add(a, b, wire.RCSendLastImm, 106, func(p *wire.Packet) { p.Payload = payload(1, 7); p.ImmDt = 0xcafef00d })
	g.add(a, b, wire.RCSendOnlyInv, 107, func(p *wire.Packet) { p.Payload = payload(32, 8); p.IETH = 0x0badcafe })
	g.add(a, b, wire.RCSendFirst, 108, withPayload(pmtu, 9))
	g.add(a, b, wire.RCSendLastInv, 109, func(p *wire.Packet) { p.Payload = payload(3, 10); p.IETH = 0x0badcafe })
	g.add(a, b, wire.RCSendOnly, 110, func(p *wire.Packet) { p.BTH.SE = true }) // zero-length SEND with solicited event
	g.add(b, a, wire.RCAck, 110, ack(6, unl))
	file("rc_send", &g)

	g = gen{}
	g.add(a, b, wire.RCWriteFirst, 200, func(p *wire.Packet) { p.RETH = reth(goldenVA, 2*pmtu+100); p.Payload = payload(pmtu, 11) })
	g.add(a, b, wire.RCWriteMiddle, 201, withPayload(pmtu, 12))
	g.add(a, b, wire.RCWriteLast, 202, withPayload(100, 13))
	g.add(b, a, wire.RCAck, 202, ack(1, unl))
	g.add(a, b, wire.RCWriteFirst, 203, func(p *wire.Packet) { p.RETH = reth(goldenVA+0x1000, pmtu+44); p.Payload = payload(pmtu, 14) })
	g.add(a, b, wire.RCWriteLastImm, 204, func(p *wire.Packet) { p.Payload = payload(44, 15); p.ImmDt = 0x00000001 })
	g.add(a, b, wire.RCWriteOnly, 205, func(p *wire.Packet) { p.RETH = reth(goldenVA+0x2000, 64); p.Payload = payload(64, 16) })
	g.add(a, b, wire.RCWriteOnlyImm, 206, func(p *wire.Packet) {
		p.RETH = reth(goldenVA+0x3000, 30)
		p.Payload = payload(30, 17)
		p.ImmDt = 0xdeadbeef
	})
	g.add(b, a, wire.RCAck, 206, ack(4, unl))
	file("rc_write", &g)

	g = gen{}
	g.add(a, b, wire.RCReadRequest, 300, func(p *wire.Packet) { p.RETH = reth(goldenVA, 2*pmtu+100); p.BTH.AckReq = true })
	g.add(b, a, wire.RCReadResponseFirst, 300, func(p *wire.Packet) { ack(0, unl)(p); p.Payload = payload(pmtu, 18) })
	g.add(b, a, wire.RCReadResponseMiddle, 301, withPayload(pmtu, 19))
	g.add(b, a, wire.RCReadResponseLast, 302, func(p *wire.Packet) { ack(1, unl)(p); p.Payload = payload(100, 20) })
	g.add(a, b, wire.RCReadRequest, 303, func(p *wire.Packet) { p.RETH = reth(goldenVA+0x40, 64); p.BTH.AckReq = true })
	g.add(b, a, wire.RCReadResponseOnly, 303, func(p *wire.Packet) { ack(2, unl)(p); p.Payload = payload(64, 21) })
	file("rc_read", &g)

	g = gen{}
	g.add(a, b, wire.RCSendOnly, 400, withPayload(64, 22))
	g.add(b, a, wire.RCAck, 400, ack(1, unl))
	g.add(a, b, wire.RCSendOnly, 401, withPayload(64, 23))
	g.add(b, a, wire.RCAck, 401, ack(2, wire.ACKSyndrome(5))) // limited credits
	g.add(a, b, wire.RCSendOnly, 403, withPayload(64, 24))    // PSN 402 was lost
	g.add(b, a, wire.RCAck, 402, ack(2, wire.NAKPSNSeqErr))
	g.add(a, b, wire.RCSendOnly, 402, withPayload(64, 25))
	g.add(b, a, wire.RCAck, 402, ack(2, wire.RNRSyndrome(12))) // RNR NAK, 0.64 ms
	g.add(a, b, wire.RCSendOnly, 402, withPayload(64, 25))
	g.add(b, a, wire.RCAck, 402, ack(3, wire.RNRSyndrome(0))) // RNR NAK, 655.36 ms
	g.add(a, b, wire.RCWriteOnly, 404, func(p *wire.Packet) { p.RETH = reth(goldenVA, 64); p.RETH.RKey = 0x1; p.Payload = payload(64, 26) })
	g.add(b, a, wire.RCAck, 404, ack(3, wire.NAKRemoteAccess))
	g.add(a, b, wire.RCSendOnly, 405, withPayload(64, 27))
	g.add(b, a, wire.RCAck, 405, ack(3, wire.NAKInvalidRequest))
	g.add(a, b, wire.RCSendOnly, 406, withPayload(64, 28))
	g.add(b, a, wire.RCAck, 406, ack(3, wire.NAKRemoteOp))
	file("rc_ack_nak", &g)

	g = gen{}
	g.add(a, b, wire.RCCompareSwap, 500, func(p *wire.Packet) {
		p.Atomic = wire.AtomicETH{VA: goldenVA + 8, RKey: goldenRKey, SwapAdd: 0x1111222233334444, Compare: 0}
		p.BTH.AckReq = true
	})
	g.add(b, a, wire.RCAtomicAck, 500, func(p *wire.Packet) { ack(1, unl)(p); p.AtomicAck.Orig = 0 })
	g.add(a, b, wire.RCFetchAdd, 501, func(p *wire.Packet) {
		p.Atomic = wire.AtomicETH{VA: goldenVA + 16, RKey: goldenRKey, SwapAdd: 1}
		p.BTH.AckReq = true
	})
	g.add(b, a, wire.RCAtomicAck, 501, func(p *wire.Packet) { ack(2, unl)(p); p.AtomicAck.Orig = 0x00000000000000ff })
	file("rc_atomic", &g)

	g = gen{ud: true}
	ua, ub := endpoint{a.mac, a.ip, 0x13}, endpoint{b.mac, b.ip, 0x14}
	g.add(ua, ub, wire.UDSendOnly, 600, func(p *wire.Packet) {
		p.DETH = wire.DETH{QKey: 0x11111111, SrcQPN: ua.qpn}
		p.Payload = payload(64, 29)
	})
	g.add(ua, ub, wire.UDSendOnlyImm, 601, func(p *wire.Packet) {
		p.DETH = wire.DETH{QKey: 0x11111111, SrcQPN: ua.qpn}
		p.Payload = payload(20, 30)
		p.ImmDt = 0x0000abcd
	})
	file("ud_send", &g)

	g = gen{}
	ca, cb := endpoint{a.mac, a.ip, 0x15}, endpoint{b.mac, b.ip, 0x16}
	g.add(ca, cb, wire.UCSendFirst, 700, withPayload(pmtu, 31))
	g.add(ca, cb, wire.UCSendLast, 701, withPayload(10, 32))
	g.add(ca, cb, wire.UCSendOnly, 702, withPayload(64, 33))
	g.add(ca, cb, wire.UCWriteOnly, 703, func(p *wire.Packet) { p.RETH = reth(goldenVA, 16); p.Payload = payload(16, 34) })
	g.add(ca, cb, wire.UCWriteOnlyImm, 704, func(p *wire.Packet) { p.RETH = reth(goldenVA, 8); p.Payload = payload(8, 35); p.ImmDt = 7 })
	file("uc_send", &g)

	g = gen{v6: true}
	g.add(hostA6, hostB6, wire.RCSendOnly, 800, withPayload(64, 36))
	g.add(hostB6, hostA6, wire.RCAck, 800, ack(1, unl))
	g.add(hostA6, hostB6, wire.RCWriteOnly, 801, func(p *wire.Packet) { p.RETH = reth(goldenVA, 100); p.Payload = payload(100, 37) })
	g.add(hostB6, hostA6, wire.RCAck, 801, ack(2, unl))
	file("ipv6", &g)

	g = gen{vlan: true}
	g.add(a, b, wire.RCSendOnly, 900, withPayload(64, 38))
	g.add(b, a, wire.RCAck, 900, ack(1, unl))
	file("vlan", &g)

	// A congestion notification (RoCEv2 A17.9.3): BECN set, 16 reserved bytes,
	// sent by the notification point B back to the flow's source QP.
	g = gen{}
	g.add(b, a, wire.CNP, 0, func(p *wire.Packet) { p.BTH.BECN = true; p.Payload = make([]byte, 16) })
	file("cnp", &g)

	g = gen{}
	addOOOFrames(&g)
	file("ooo-frames", &g)

	return files
}

// addOOOFrames adds one frame of each OOO opcode (docs/ooo-wire.md): the
// third packet of a 4 KiB OOO_WRITE and its completion; a READ request; a
// third-party READ request A sends as controller to the source B for the
// sink T, and a third-party WRITE B sends A as sink for controller C.
func addOOOFrames(g *gen) {
	a, b := hostA, hostB
	ctxA, ctxB := wire.MakeCtx(0x000202, 5), wire.MakeCtx(0x000101, 3)
	gidOf := func(ip string) [16]byte { return netip.MustParseAddr("::ffff:" + ip).As16() }
	hostT := wire.XTP{GID: gidOf("198.51.100.3"), QPN: 0x13, Ctx: wire.MakeCtx(0x000301, 2)}
	hostC := wire.XTP{GID: gidOf("198.51.100.4"), QPN: 0x14, Ctx: wire.MakeCtx(0x000401, 1)}
	g.add(a, b, wire.OOOWrite, 2, func(p *wire.Packet) {
		p.RETH = reth(goldenVA+2048, 1024)
		p.XRH = wire.XRH{Ctx: ctxB, TID: 7, Total: 4096, Initiator: ctxA, Notify: wire.NotifyInitiator, Seg: wire.MTU1024, Tag: 0xdeadbeef}
		p.Payload = payload(1024, 40)
	})
	g.add(b, a, wire.OOOCompletion, 0, func(p *wire.Packet) {
		p.XRH = wire.XRH{Ctx: ctxA, TID: 7, Total: 4096, Initiator: ctxB, Notify: wire.NotifyInitiator, Tag: 0xdeadbeef}
		p.XCS = wire.XCS{Status: wire.XCSSuccess}
	})
	g.add(a, b, wire.OOOReadReq, 0, func(p *wire.Packet) {
		p.RETH = reth(goldenVA+0x2000, 512)
		p.XRH = wire.XRH{Ctx: wire.MakeCtx(0x000102, 3), TID: 8, Total: 512, Initiator: wire.MakeCtx(0x000203, 5),
			Notify: wire.NotifyBoth, Seg: wire.MTU256, Tag: 8}
		p.XRR = wire.XRR{VA: 0x00007f3a5d000000, RKey: 0x1badb002}
	})
	g.add(a, b, wire.OOO3PReadReq, 0, func(p *wire.Packet) {
		p.RETH = reth(goldenVA+0x3000, 300)
		p.XRH = wire.XRH{Ctx: wire.MakeCtx(0x000103, 3), TID: 1, Total: 300, Initiator: wire.MakeCtx(0x000204, 5),
			Notify: wire.NotifyInitiator, Seg: wire.MTU256, Tag: 9}
		p.XRR = wire.XRR{VA: 0x00007f3a5e000000, RKey: 0x0000c0de}
		p.XTPTarget = hostT
		p.XTPController = wire.XTP{GID: gidOf("198.51.100.1"), QPN: a.qpn, Ctx: wire.MakeCtx(0x000204, 5)}
	})
	g.add(b, a, wire.OOO3PWrite, 1, func(p *wire.Packet) {
		p.RETH = reth(goldenVA+0x4000+256, 44)
		p.XRH = wire.XRH{Ctx: wire.MakeCtx(0x000205, 5), TID: 4, Total: 300, Initiator: wire.MakeCtx(0x000105, 3),
			Notify: wire.NotifyInitiator, Seg: wire.MTU256, Tag: 10}
		p.XTPController = hostC
		p.Payload = payload(44, 41)
	})
}

// encodeGolden renders a golden file as pcapng bytes with fixed timestamps.
func encodeGolden(t testing.TB, gf goldenFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.AddInterface(gf.ifc)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	frame := make([]byte, 9000)
	for i, f := range gf.frames {
		n, err := f.pkt.Encode(frame)
		if err != nil {
			t.Fatalf("%s frame %d (%v): encode: %v", gf.name, i+1, f.pkt.BTH.Opcode, err)
		}
		ts := base.Add(time.Duration(i) * 10 * time.Microsecond)
		if err := w.WritePacket(id, ts, f.dir, frame[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dumpText is what `xdproce dump` prints for a capture (one file).
func dumpText(t testing.TB, file []byte) string {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	var f Frame
	for {
		err := r.Next(&f)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString(Describe(&f).String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

// checkGolden compares got with the file at path, or writes it under -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./capture -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		if strings.HasSuffix(path, ".txt") {
			t.Errorf("%s differs (-want +got):\n%s", path, cmp.Diff(string(want), string(got)))
		} else {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s differs from the generated capture at byte %d (got %d bytes, want %d); if the change is intended, run go test ./capture -run Golden -update", path, i, len(got), len(want))
		}
	}
}

// TestGoldenCaptures regenerates every golden capture in memory and compares
// it byte for byte with testdata/pcaps/NAME.pcapng, and its dump with
// NAME.txt. Every frame must decode with a good ICRC, and decode back to the
// packet it was built from.
func TestGoldenCaptures(t *testing.T) {
	seen := map[wire.Opcode]bool{}
	for _, gf := range goldenFiles() {
		t.Run(gf.name, func(t *testing.T) {
			file := encodeGolden(t, gf)
			checkGolden(t, filepath.Join(goldenDir, gf.name+".pcapng"), file)
			text := dumpText(t, file)
			checkGolden(t, filepath.Join(goldenDir, gf.name+".txt"), []byte(text))

			r, err := NewReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			var f Frame
			for i, want := range gf.frames {
				if err := r.Next(&f); err != nil {
					t.Fatal(err)
				}
				rec := Describe(&f)
				if rec.Bad() || rec.BTH == nil {
					t.Fatalf("frame %d: %s", i+1, rec)
				}
				if rec.BTH.Opcode != want.pkt.BTH.Opcode.String() || rec.BTH.PSN != want.pkt.BTH.PSN || rec.BTH.DestQPN != want.pkt.BTH.DestQPN || f.Dir != want.dir {
					t.Errorf("frame %d: %s; want %v psn %d qpn %#x %v", i+1, rec, want.pkt.BTH.Opcode, want.pkt.BTH.PSN, want.pkt.BTH.DestQPN, want.dir)
				}
				var p wire.Packet
				if err := p.DecodeWith(f.Data, wire.AcceptOOO); err != nil {
					t.Fatalf("frame %d: decode: %v", i+1, err)
				}
				// Decode aliases and fills in what Encode computed; compare the inputs.
				got := p
				wantP := want.pkt
				got.ICRC, wantP.ICRC, got.BTH.PadCount, wantP.BTH.PadCount = 0, 0, 0, 0
				if len(wantP.Payload) == 0 {
					wantP.Payload, got.Payload = nil, nil
				}
				if diff := cmp.Diff(wantP, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
					t.Errorf("frame %d decodes differently (-built +decoded):\n%s", i+1, diff)
				}
				seen[want.pkt.BTH.Opcode] = true
			}
			if err := r.Next(&f); err != io.EOF {
				t.Errorf("extra frames: %v", err)
			}
		})
	}
	// Every RC opcode appears at least once.
	for _, op := range wire.Opcodes() {
		if info, _ := op.Info(); info.Transport == wire.RC && !seen[op] {
			t.Errorf("no golden frame for %v", op)
		}
	}
	// testdata/pcaps holds only valid captures (other packages put their
	// golden captures there too): every file reads, every RoCE frame verifies.
	all, _ := filepath.Glob(filepath.Join(goldenDir, "*.pcapng"))
	for _, path := range all {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		var f Frame
		for {
			err := r.Next(&f)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("%s: %v", path, err)
				break
			}
			if rec := Describe(&f); rec.Bad() {
				t.Errorf("%s: %s", path, rec)
			}
		}
	}
}

// malformedFiles derives broken inputs from a golden capture: a truncated
// file, a capture with one flipped byte in a RoCE payload (a bad ICRC), a
// capture whose block length is inconsistent, and a file that is not a
// capture at all.
func malformedFiles(t testing.TB) map[string][]byte {
	files := goldenFiles()
	good := encodeGolden(t, files[0]) // rc_send
	out := map[string][]byte{}
	out["truncated.pcapng"] = good[:len(good)-37]
	// Flip a byte in the payload of the first frame: the capture stays a
	// valid pcapng file, but the ICRC no longer matches.
	flipped := bytes.Clone(good)
	off := 0
	for le.Uint32(flipped[off:]) != blockEPB {
		off += int(le.Uint32(flipped[off+4:]))
	}
	flipped[off+28+14+20+8+12+10] ^= 0x01 // EPB header, Eth, IPv4, UDP, BTH, payload byte 10
	out["flipped_byte.pcapng"] = flipped
	badLen := bytes.Clone(good)
	le.PutUint32(badLen[off+4:], le.Uint32(badLen[off+4:])+2)
	out["bad_block_length.pcapng"] = badLen
	out["not_a_capture.pcapng"] = []byte("this is a text file, not a packet capture\n")
	out["empty.pcap"] = nil
	return out
}

// TestMalformedFiles keeps testdata/malformed in step with malformedFiles
// and checks that each one fails as it should.
func TestMalformedFiles(t *testing.T) {
	for name, data := range malformedFiles(t) {
		path := filepath.Join(malformedDir, name)
		checkGolden(t, path, data)
		err := readAll(data)
		switch name {
		case "flipped_byte.pcapng":
			if err != nil {
				t.Errorf("%s: read: %v (the file itself is valid)", name, err)
			}
			r, _ := NewReader(bytes.NewReader(data))
			var f Frame
			r.Next(&f)
			rec := Describe(&f)
			if !rec.Bad() || rec.ICRC == nil || rec.ICRC.OK {
				t.Errorf("%s: first frame %s, want a bad ICRC", name, rec)
			}
		case "truncated.pcapng":
			if !errors.Is(err, ErrTruncated) {
				t.Errorf("%s: %v, want ErrTruncated", name, err)
			}
		case "bad_block_length.pcapng":
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %v, want ErrMalformed", name, err)
			}
		default:
			if !errors.Is(err, ErrNotCapture) {
				t.Errorf("%s: %v, want ErrNotCapture", name, err)
			}
		}
	}
}

// TestGoldenTshark dissects every golden capture with tshark: no malformed
// packets or expert errors, every frame RRoCE, and tshark's opcode, QPN, PSN
// and direction equal to what the frame was built with.
func TestGoldenTshark(t *testing.T) {
	tshark := testenv.Tool(t, "tshark", "apt-get install tshark")
	for _, gf := range goldenFiles() {
		t.Run(gf.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), gf.name+".pcapng")
			if err := os.WriteFile(path, encodeGolden(t, gf), 0o644); err != nil {
				t.Fatal(err)
			}
			verbose, err := exec.Command(tshark, "--disable-heuristic", "rpcrdma_infiniband", "-r", path, "-V").CombinedOutput()
			if err != nil {
				t.Fatalf("tshark -V: %v\n%s", err, verbose)
			}
			for _, line := range strings.Split(string(verbose), "\n") {
				if strings.Contains(line, "Malformed") || strings.Contains(line, "Expert Info (Error") ||
					strings.Contains(line, "Expert Info (Warning") {
					t.Errorf("tshark: %s", strings.TrimSpace(line))
				}
			}
			out, err := exec.Command(tshark, "--disable-heuristic", "rpcrdma_infiniband", "-r", path, "-T", "fields",
				"-E", "separator=|", "-e", "_ws.col.Protocol", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
				"-e", "infiniband.bth.psn", "-e", "frame.packet_flags_direction").Output()
			if err != nil {
				t.Fatalf("tshark -T fields: %v", err)
			}
			var want strings.Builder
			for _, f := range gf.frames {
				dir := "0x00000001"
				if f.dir == DirOutbound {
					dir = "0x00000002"
				}
				fmt.Fprintf(&want, "RRoCE|%d|%s|%d|%s\n", f.pkt.BTH.Opcode, "0x"+fmt.Sprintf("%06x", f.pkt.BTH.DestQPN), f.pkt.BTH.PSN, dir)
			}
			if diff := cmp.Diff(want.String(), string(out)); diff != "" {
				t.Errorf("tshark fields (protocol|opcode|destqp|psn|direction) (-want +got):\n%s", diff)
			}
		})
	}
}
