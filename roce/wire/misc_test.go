package wire_test

import (
	"encoding/binary"
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/roce/wire"
)

var long = flag.Bool("long", false, "run the long variants (every bit of every captured frame in the corruption test)")

// opcodeFacts restates ROCEV2.md's opcode list, independently of opcode.go.
var opcodeFacts = []struct {
	op      wire.Opcode
	name    string
	headers wire.Headers
	hdrLen  int
	payload bool
	request bool
}{
	{0x00, "RC_SEND_FIRST", 0, 12, true, true},
	{0x01, "RC_SEND_MIDDLE", 0, 12, true, true},
	{0x02, "RC_SEND_LAST", 0, 12, true, true},
	{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x04, "RC_SEND_ONLY", 0, 12, true, true},
	{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x06, "RC_RDMA_WRITE_FIRST", wire.HasRETH, 28, true, true},
	{0x07, "RC_RDMA_WRITE_MIDDLE", 0, 12, true, true},
	{0x08, "RC_RDMA_WRITE_LAST", 0, 12, true, true},
	{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x0A, "RC_RDMA_WRITE_ONLY", wire.HasRETH, 28, true, true},
	{0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", wire.HasRETH | wire.HasImmDt, 32, true, true},
	{0x0C, "RC_RDMA_READ_REQUEST", wire.HasRETH, 28, false, true},
	{0x0D, "RC_RDMA_READ_RESPONSE_FIRST", wire.HasAETH, 16, true, false},
	{0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, 12, true, false},
	{0x0F, "RC_RDMA_READ_RESPONSE_LAST", wire.HasAETH, 16, true, false},
	{0x10, "RC_RDMA_READ_RESPONSE_ONLY", wire.HasAETH, 16, true, false},
	{0x11, "RC_ACKNOWLEDGE", wire.HasAETH, 16, false, false},
	{0x12, "RC_ATOMIC_ACKNOWLEDGE", wire.HasAETH | wire.HasAtomicAckETH, 24, false, false},
	{0x13, "RC_COMPARE_SWAP", wire.HasAtomicETH, 40, false, true},
	{0x14, "RC_FETCH_ADD", wire.HasAtomicETH, 40, false, true},
	{0x16, "RC_SEND_LAST_WITH_INVALIDATE", wire.HasIETH, 16, true, true},
	{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", wire.HasIETH, 16, true, true},
	{0x20, "UC_SEND_FIRST", 0, 12, true, true},
	{0x21, "UC_SEND_MIDDLE", 0, 12, true, true},
	{0x22, "UC_SEND_LAST", 0, 12, true, true},
	{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x24, "UC_SEND_ONLY", 0, 12, true, true},
	{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x26, "UC_RDMA_WRITE_FIRST", wire.HasRETH, 28, true, true},
	{0x27, "UC_RDMA_WRITE_MIDDLE", 0, 12, true, true},
	{0x28, "UC_RDMA_WRITE_LAST", 0, 12, true, true},
	{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", wire.HasImmDt, 16, true, true},
	{0x2A, "UC_RDMA_WRITE_ONLY", wire.HasRETH, 28, true, true},
	{0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", wire.HasRETH | wire.HasImmDt, 32, true, true},
	{0x64, "UD_SEND_ONLY", wire.HasDETH, 20, true, true},
	{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", wire.HasDETH | wire.HasImmDt, 24, true, true},
	{0x81, "CNP", 0, 12, true, false},
	// OOO mode (docs/ooo-wire.md): RETH 16, XRH 24, XRR 12, XCS 4, XTP 24.
	{0xC0, "OOO_WRITE", wire.HasRETH | wire.HasXRH, 52, true, true},
	{0xC1, "OOO_READ_REQ", wire.HasRETH | wire.HasXRH | wire.HasXRR, 64, false, true},
	{0xC2, "OOO_COMPLETION", wire.HasXRH | wire.HasXCS, 40, false, false},
	{0xC3, "OOO_3P_READ_REQ", wire.HasRETH | wire.HasXRH | wire.HasXRR | wire.HasXTPTarget | wire.HasXTPController, 112, false, true},
	{0xC4, "OOO_3P_WRITE", wire.HasRETH | wire.HasXRH | wire.HasXTPController, 76, true, true},
	// Half-RDMA / half-FIFO.
	{0xC5, "OOO_FIFO_SEND", wire.HasXRH, 36, true, true},
	{0xC6, "OOO_READ_REQ_TO_FIFO", wire.HasRETH | wire.HasXRH, 52, false, true},
	{0xC7, "OOO_READ_REQ_FROM_FIFO", wire.HasXRH | wire.HasXRR, 48, false, true},
	// Selective repeat (docs/sr-wire.md): AETH, then the 32-byte SACK bitmap as payload.
	{0xE0, "SR_SACK", wire.HasAETH, 16, true, false},
}

func TestOpcodeTable(t *testing.T) {
	var known []wire.Opcode
	for _, f := range opcodeFacts {
		known = append(known, f.op)
		info, ok := f.op.Info()
		if !ok {
			t.Errorf("%#x: not known", uint8(f.op))
			continue
		}
		if f.op.String() != f.name || info.Name != f.name {
			t.Errorf("%#x: String %q, Name %q, want %q", uint8(f.op), f.op.String(), info.Name, f.name)
		}
		if info.Headers != f.headers || info.HdrLen != f.hdrLen || info.Payload != f.payload || info.Request != f.request {
			t.Errorf("%s: %+v, want headers %v len %d payload %v request %v", f.name, info, f.headers, f.hdrLen, f.payload, f.request)
		}
		tr := map[string]wire.Transport{"RC": wire.RC, "UC": wire.UC, "UD": wire.UD, "CNP": wire.CNPTransport, "OOO": wire.OOO, "SR": wire.SR}[strings.SplitN(f.name, "_", 2)[0]]
		if info.Transport != tr {
			t.Errorf("%s: transport %v, want %v", f.name, info.Transport, tr)
		}
		var pos wire.Position
		switch {
		case strings.Contains(f.name, "FIRST"):
			pos = wire.PosFirst
		case strings.Contains(f.name, "MIDDLE"):
			pos = wire.PosMiddle
		case strings.Contains(f.name, "LAST"):
			pos = wire.PosLast
		default:
			pos = wire.PosOnly
		}
		if info.Pos != pos {
			t.Errorf("%s: position %v, want %v", f.name, info.Pos, pos)
		}
		kinds := []struct {
			sub  string
			kind wire.Kind
		}{
			{"READ_REQ", wire.KindReadRequest}, {"READ_RESPONSE", wire.KindReadResponse}, {"COMPLETION", wire.KindCompletion},
			{"ATOMIC_ACK", wire.KindAtomicAck}, {"ACKNOWLEDGE", wire.KindAck}, {"WRITE", wire.KindWrite},
			{"SEND", wire.KindSend}, {"COMPARE_SWAP", wire.KindCompareSwap}, {"FETCH_ADD", wire.KindFetchAdd},
			{"CNP", wire.KindCNP},
		}
		for _, k := range kinds {
			if strings.Contains(f.name, k.sub) {
				if info.Kind != k.kind {
					t.Errorf("%s: kind %v, want %v", f.name, info.Kind, k.kind)
				}
				break
			}
		}
		if f.op>>5 == 1 && f.op&0x1F <= 0x0B {
			rc, _ := (f.op &^ 0x20).Info()
			if rc.Kind != info.Kind || rc.Pos != info.Pos || rc.Headers != info.Headers {
				t.Errorf("%s differs from its RC twin %s", f.name, rc.Name)
			}
		}
	}
	if diff := cmp.Diff(known, wire.Opcodes()); diff != "" {
		t.Errorf("Opcodes() (-want +got):\n%s", diff)
	}
	for _, o := range []wire.Opcode{0x15, 0x18, 0x19, 0x1F, 0x2C, 0x40, 0x60, 0x63, 0x66, 0x80, 0xC8, 0xDF, 0xE1, 0xFF} {
		if _, ok := o.Info(); ok || o.Known() {
			t.Errorf("%#x: known", uint8(o))
		}
	}
	if got := wire.Opcode(0x15).String(); got != "Opcode(0x15)" {
		t.Errorf("String of unknown = %q", got)
	}
	if got := (wire.HasRETH | wire.HasImmDt).String(); got != "RETH|ImmDt" {
		t.Errorf("Headers.String = %q", got)
	}
	if got := (wire.HasRETH | wire.HasXRH | wire.HasXTPController).String(); got != "RETH|XRH|XTPController" {
		t.Errorf("Headers.String = %q", got)
	}
	if got := wire.OOO.String(); got != "OOO" {
		t.Errorf("Transport.String = %q", got)
	}
}

func TestPSN(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		diff int32
	}{
		{5, 3, 2}, {3, 5, -2}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1}, {0x7FFFFF, 0, 0x7FFFFF},
		{0x800000, 0, -0x800000}, {0x000010, 0xFFFFF0, 0x20},
	} {
		if got := wire.PSNDiff(c.a, c.b); got != c.diff {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.diff)
		}
		if got := wire.PSNBefore(c.a, c.b); got != (c.diff < 0) {
			t.Errorf("PSNBefore(%#x, %#x) = %v", c.a, c.b, got)
		}
	}
	if got := wire.PSNAdd(0xFFFFFE, 3); got != 1 {
		t.Errorf("PSNAdd wrap = %#x, want 1", got)
	}
	if !wire.PSNInWindow(2, 0xFFFFFE, 5) || !wire.PSNInWindow(0xFFFFFE, 0xFFFFFE, 1) || wire.PSNInWindow(3, 0xFFFFFE, 5) ||
		wire.PSNInWindow(0xFFFFFD, 0xFFFFFE, 5) || wire.PSNInWindow(7, 7, 0) {
		t.Error("PSNInWindow wrong around the wrap")
	}
}

func TestSourcePorts(t *testing.T) {
	// QPN pairs and source ports from testdata/rxe/SUMMARY.txt and the
	// tools' output files.
	for _, c := range []struct {
		l, r uint32
		port uint16
	}{
		{0x11, 0x11, 49441}, {0x12, 0x12, 49476}, {0x13, 0x13, 49513}, {0x15, 0x15, 49593},
		{0x16, 0x16, 49636}, {0x17, 0x17, 49681}, {0x18, 0x18, 49728}, {0x19, 0x19, 49777},
		{0x1a, 0x1a, 49828}, {0x1b, 0x1b, 49881}, {0x1c, 0x1c, 49936}, {0x1d, 0x1d, 49993},
		{0x21, 0x100, 57600}, {0x100, 0x21, 57600},
	} {
		if got := wire.SourcePort(c.l, c.r); got != c.port {
			t.Errorf("SourcePort(%#x, %#x) = %d, want %d", c.l, c.r, got, c.port)
		}
	}
	if got := wire.UDSourcePort(1); got != 55410 {
		t.Errorf("UDSourcePort(1) = %d, want 55410", got)
	}
	if got := wire.UDSourcePort(0x14); got != 59626 {
		t.Errorf("UDSourcePort(0x14) = %d, want 59626 (ud_pingpong)", got)
	}
	for fl := uint32(0); fl < 1<<20; fl += 4099 {
		if p := wire.SourcePortFromFlowLabel(fl); p < 0xC000 {
			t.Fatalf("SourcePortFromFlowLabel(%#x) = %d", fl, p)
		}
	}

	// Every captured RC/UC/UD packet of the tools that do not use RDMA CM
	// leaves from the port the QPNs give (both ends use the same QPN there).
	for _, f := range rxeFrames(t) {
		if strings.HasPrefix(f.file, "rdmacm") || strings.HasPrefix(f.file, "host_peer") {
			continue
		}
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		want := wire.SourcePort(p.BTH.DestQPN, p.BTH.DestQPN)
		if p.BTH.Opcode == wire.UDSendOnly {
			want = wire.UDSourcePort(p.DETH.SrcQPN)
		}
		if p.SrcPort != want {
			t.Errorf("%v: source port %d, want %d", f, p.SrcPort, want)
		}
	}
}

func TestMTU(t *testing.T) {
	for _, c := range []struct {
		link int
		want wire.MTU
	}{
		{1500, wire.MTU1024}, {9000, wire.MTU4096}, {4176, wire.MTU4096}, {4175, wire.MTU2048},
		{1104, wire.MTU1024}, {1103, wire.MTU512}, {336, wire.MTU256}, {335, 0}, {0, 0},
	} {
		if got := wire.PathMTU(c.link); got != c.want {
			t.Errorf("PathMTU(%d) = %v, want %v", c.link, got, c.want)
		}
	}
	for m, n := range map[wire.MTU]int{wire.MTU256: 256, wire.MTU512: 512, wire.MTU1024: 1024, wire.MTU2048: 2048, wire.MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != n {
			t.Errorf("%v.Bytes() = %d, want %d", m, m.Bytes(), n)
		}
		if n != 0 && wire.MTUFromBytes(n) != m {
			t.Errorf("MTUFromBytes(%d) = %v", n, wire.MTUFromBytes(n))
		}
	}
	if wire.MTUFromBytes(1000) != 0 || wire.MTU1024.String() != "MTU1024" {
		t.Error("MTUFromBytes(1000) or String wrong")
	}
}

func TestAETH(t *testing.T) {
	for _, c := range []struct {
		a    wire.AETH
		typ  wire.SyndromeType
		code uint8
		s    string
	}{
		{wire.AETH{Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), MSN: 5}, wire.SyndromeACK, 31, "ACK credits=31 msn=5"},
		{wire.AETH{Syndrome: wire.RNRSyndrome(12)}, wire.SyndromeRNR, 12, "RNR_NAK timer=12 msn=0"},
		{wire.AETH{Syndrome: wire.NAKRemoteAccess, MSN: 3}, wire.SyndromeNAK, 2, "NAK REMOTE_ACCESS_ERROR msn=3"},
		{wire.AETH{Syndrome: wire.NAKPSNSeqErr}, wire.SyndromeNAK, 0, "NAK PSN_SEQUENCE_ERROR msn=0"},
	} {
		if c.a.Type() != c.typ || c.a.Syndrome&0x1F != c.code || c.a.String() != c.s {
			t.Errorf("%#x: type %v code %d %q, want %v %d %q", c.a.Syndrome, c.a.Type(), c.a.Syndrome&0x1F, c.a.String(), c.typ, c.code, c.s)
		}
	}
	if wire.RNRSyndrome(12) != 0x2C || wire.ACKSyndrome(wire.UnlimitedCredits) != 0x1F {
		t.Error("syndromes differ from what rxe sends (0x2C RNR, 0x1F ACK)")
	}
	// The captures carry exactly these syndromes.
	seen := map[uint8]bool{}
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		if info, _ := p.BTH.Opcode.Info(); info.Headers&wire.HasAETH != 0 {
			seen[p.AETH.Syndrome] = true
		}
	}
	if diff := cmp.Diff(map[uint8]bool{0x1F: true, 0x2C: true, 0x62: true}, seen); diff != "" {
		t.Errorf("AETH syndromes in the captures (-want +got):\n%s", diff)
	}
}

// TestCMSourcePorts checks the RDMA-CM flow label against the captures: each
// CM ConnectRequest (a MAD on QP1) carries the service ID (port space 0x0106
// and the server's port), the client's port in the rdma_cm private data and
// the primary path flow label; CMFlowLabel of the ports must equal that flow
// label, and SourcePortFromFlowLabel of it must be the source port of every
// RC packet of the connection.
func TestCMSourcePorts(t *testing.T) {
	want := map[string]map[uint16]bool{}
	got := map[string]map[uint16]bool{}
	for _, f := range rxeFrames(t) {
		if !strings.HasPrefix(f.file, "rdmacm") {
			continue
		}
		if want[f.file] == nil {
			want[f.file], got[f.file] = map[uint16]bool{}, map[uint16]bool{}
		}
		var p wire.Packet
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		if info, _ := p.BTH.Opcode.Info(); info.Transport == wire.RC {
			got[f.file][p.SrcPort] = true
			continue
		}
		mad := p.Payload
		if p.BTH.DestQPN != 1 || len(mad) != 256 || mad[0] != 1 || mad[1] != 7 || binary.BigEndian.Uint16(mad[16:]) != 0x0010 {
			continue // not a CM ConnectRequest
		}
		req := mad[24:]
		sid := binary.BigEndian.Uint64(req[8:])
		if sid>>16 != 0x0106 {
			t.Fatalf("%v: service ID %#x is not in the RDMA_PS_TCP space", f, sid)
		}
		dport := uint16(sid)
		priv := req[140:] // REQ private data: the last 92 of its 232 bytes
		if priv[1]>>4 != 4 {
			t.Fatalf("%v: cma header IP version %d", f, priv[1]>>4)
		}
		sport := binary.BigEndian.Uint16(priv[2:])
		fl := binary.BigEndian.Uint32(req[88:]) >> 12
		if c := wire.CMFlowLabel(sport, dport); c != fl {
			t.Errorf("%v: CMFlowLabel(%d, %d) = %#x, REQ carries %#x", f, sport, dport, c, fl)
		}
		want[f.file][wire.SourcePortFromFlowLabel(fl)] = true
	}
	if len(want) != 2 {
		t.Fatalf("rdmacm captures: %d", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RC source ports of the CM connections (-from the REQs +captured):\n%s", diff)
	}
}
