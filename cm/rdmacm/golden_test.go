package rdmacm_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/roce/wire"
)

// capturedMAD is one QP1 MAD of an rxe capture.
type capturedMAD struct {
	frame int // frame number, from 1
	src   netip.Addr
	mad   []byte
}

// rxeCapture reads testdata/rxe/NAME.pcap with capture's reader and returns
// the payloads of its UD SENDs to QP1, checking the QP1 framing on the way
// (Q_Key 0x80010000, source QP 1, 256-byte payload), and the PSN of the
// first RC request from each address.
func rxeCapture(t testing.TB, name string) (mads []capturedMAD, firstRC map[netip.Addr]uint32) {
	t.Helper()
	firstRC = map[netip.Addr]uint32{}
	eachFrame(t, name, func(i int, fr *capture.Frame) {
		var p wire.Packet
		if err := p.Decode(fr.Data); err != nil {
			return // not RoCE
		}
		if info, _ := p.BTH.Opcode.Info(); info.Transport == wire.RC && info.Request {
			if _, ok := firstRC[p.SrcIP]; !ok {
				firstRC[p.SrcIP] = p.BTH.PSN
			}
		}
		if p.BTH.DestQPN != 1 {
			return
		}
		if p.BTH.Opcode != wire.UDSendOnly || p.DETH.QKey != wire.GSIQKey || p.DETH.SrcQPN != 1 || len(p.Payload) != rdmacm.MADLen {
			t.Fatalf("%s#%d: QP1 frame %v qkey %#x srcqp %d payload %d, want UD_SEND_ONLY 0x80010000 1 256",
				name, i, p.BTH.Opcode, p.DETH.QKey, p.DETH.SrcQPN, len(p.Payload))
		}
		mads = append(mads, capturedMAD{frame: i, src: p.SrcIP, mad: bytes.Clone(p.Payload)})
	})
	return mads, firstRC
}

var (
	client = netip.MustParseAddr("192.0.2.12") // guest 2, the active side in both captures
	server = netip.MustParseAddr("192.0.2.11")
)

func gid(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// decodeAll decodes every MAD, checks that re-encoding gives the captured
// bytes exactly, and returns the messages.
func decodeAll(t *testing.T, name string, mads []capturedMAD) ([]rdmacm.Header, []rdmacm.Message) {
	t.Helper()
	var hs []rdmacm.Header
	var ms []rdmacm.Message
	buf := make([]byte, rdmacm.MADLen)
	for _, c := range mads {
		h, m, err := rdmacm.Decode(c.mad)
		if err != nil {
			t.Fatalf("%s#%d: %v", name, c.frame, err)
		}
		n, err := rdmacm.Encode(buf, h, m)
		if err != nil {
			t.Fatalf("%s#%d: re-encode %v: %v", name, c.frame, m.AttrID(), err)
		}
		if !bytes.Equal(buf[:n], c.mad) {
			t.Errorf("%s#%d: re-encoded %v differs from the capture:\n got %x\nwant %x", name, c.frame, m.AttrID(), buf[:n], c.mad)
		}
		hs, ms = append(hs, h), append(ms, m)
	}
	return hs, ms
}

// checkREQ asserts what every rdma_cm REQ of the captures shows: rxe's
// path (IPv4-mapped GIDs, permissive LIDs, hop limit 64, MTU 1024 as the
// .txt's "Mtu: 1024[B]"), the kernel's CM defaults, and the flow label rxe
// derives from the CM ports, (sport·31 + dport) & 0xFFFFF (ROCEV2.md),
// which pins the 20-bit field's position.
func checkREQ(t *testing.T, req *rdmacm.REQ, port uint16) rdmacm.IPHeader {
	t.Helper()
	if req.ServiceID != rdmacm.ServiceID(rdmacm.PSTCP, port) || req.ServiceID != 0x0000000001060000|uint64(port) {
		t.Errorf("REQ service ID %#x, want RDMA_PS_TCP port %d", req.ServiceID, port)
	}
	ps, p, ok := rdmacm.ParseServiceID(req.ServiceID)
	if !ok || ps != rdmacm.PSTCP || p != port {
		t.Errorf("ParseServiceID(%#x) = %#x, %d, %v", req.ServiceID, ps, p, ok)
	}
	ip, user, err := rdmacm.ParseIPHeader(req.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	if ip.Src != client || ip.Dst != server || len(user) != rdmacm.REQUserDataMax || !bytes.Equal(user, make([]byte, 56)) {
		t.Errorf("REQ IP CM header %+v, user data %x; want %v → %v and 56 zero bytes", ip, user, client, server)
	}
	want := rdmacm.Path{
		LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gid(client), RemoteGID: gid(server),
		FlowLabel: (uint32(ip.SrcPort)*31 + uint32(port)) & 0xFFFFF, HopLimit: 64, LocalACKTimeout: 19,
	}
	if diff := cmp.Diff(want, req.Primary); diff != "" {
		t.Errorf("REQ primary path (-want +got):\n%s", diff)
	}
	if req.Alternate != (rdmacm.Path{}) {
		t.Errorf("REQ alternate path %+v, want none", req.Alternate)
	}
	if req.PathMTU != 3 || req.RetryCount != 7 || req.RNRRetryCount != 7 || req.MaxCMRetries != 15 ||
		req.RemoteCMResponseTimeout != 20 || req.LocalCMResponseTimeout != 20 || req.PKey != 0xFFFF ||
		req.TransportService != rdmacm.TransportRC || req.SRQ || req.LocalQKey != 0 {
		t.Errorf("REQ %+v: want MTU 3, retries 7/7, max CM retries 15, CM timeouts 20, P_Key 0xFFFF, RC, no SRQ", req)
	}
	return ip
}

// checkExchange asserts the comm IDs, QPNs and TIDs that tie one
// REQ/REP/RTU exchange together, and the PSNs the data packets then carry:
// on rxe the active side's RC requests start at the REP's starting PSN and
// the passive side's at the REQ's.
func checkExchange(t *testing.T, hs []rdmacm.Header, ms []rdmacm.Message, firstRC map[netip.Addr]uint32) (*rdmacm.REQ, *rdmacm.REP) {
	t.Helper()
	req, ok1 := ms[0].(*rdmacm.REQ)
	rep, ok2 := ms[1].(*rdmacm.REP)
	rtu, ok3 := ms[2].(*rdmacm.RTU)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("exchange %v %v %v, want REQ REP RTU", ms[0].AttrID(), ms[1].AttrID(), ms[2].AttrID())
	}
	if hs[1].TID != hs[0].TID || hs[2].TID != hs[0].TID || uint32(hs[0].TID>>32) != 2 {
		t.Errorf("TIDs %#x %#x %#x: want one TID with the agent's high part 2", hs[0].TID, hs[1].TID, hs[2].TID)
	}
	if rep.RemoteCommID != req.LocalCommID || rtu.LocalCommID != req.LocalCommID || rtu.RemoteCommID != rep.LocalCommID {
		t.Errorf("comm IDs REQ %#x, REP %#x/%#x, RTU %#x/%#x do not pair up",
			req.LocalCommID, rep.LocalCommID, rep.RemoteCommID, rtu.LocalCommID, rtu.RemoteCommID)
	}
	if rep.ResponderResources != req.InitiatorDepth || rep.InitiatorDepth != req.ResponderResources ||
		rep.RNRRetryCount != 7 || rep.TargetACKDelay != 15 || rep.LocalCAGUID != 0x5054c0fffe00020b || req.LocalCAGUID != 0x5054c0fffe00020c {
		t.Errorf("REP %+v for REQ %+v", rep, req)
	}
	if firstRC != nil && (firstRC[client] != rep.StartingPSN || firstRC[server] != req.StartingPSN) {
		t.Errorf("first RC PSNs client %#x server %#x, want REP's %#x and REQ's %#x",
			firstRC[client], firstRC[server], rep.StartingPSN, req.StartingPSN)
	}
	return req, rep
}

func checkDisconnect(t *testing.T, dreq, drep rdmacm.Message, active *rdmacm.REQ, passive *rdmacm.REP) {
	t.Helper()
	dq, ok1 := dreq.(*rdmacm.DREQ)
	dp, ok2 := drep.(*rdmacm.DREP)
	if !ok1 || !ok2 {
		t.Fatalf("teardown %v %v, want DREQ DREP", dreq.AttrID(), drep.AttrID())
	}
	want := rdmacm.DREQ{LocalCommID: active.LocalCommID, RemoteCommID: passive.LocalCommID, RemoteQPN: passive.LocalQPN}
	if diff := cmp.Diff(&want, dq); diff != "" {
		t.Errorf("DREQ (-want +got):\n%s", diff)
	}
	if dp.LocalCommID != passive.LocalCommID || dp.RemoteCommID != active.LocalCommID || dp.PrivateData != [224]byte{} {
		t.Errorf("DREP %+v", dp)
	}
}

// TestGoldenRping decodes the CM MADs of rping -C 2 -S 64 between two rxe
// guests: REQ, REP, RTU, then DREQ, DREP. The .txt shows the server at
// 192.0.2.11 and rping's default port 7174.
func TestGoldenRping(t *testing.T) {
	mads, firstRC := rxeCapture(t, "rdmacm_rping")
	hs, ms := decodeAll(t, "rdmacm_rping", mads)
	var got []rdmacm.AttrID
	for _, m := range ms {
		got = append(got, m.AttrID())
	}
	want := []rdmacm.AttrID{rdmacm.AttrREQ, rdmacm.AttrREP, rdmacm.AttrRTU, rdmacm.AttrDREQ, rdmacm.AttrDREP}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("messages (-want +got):\n%s", diff)
	}
	if mads[0].src != client || mads[1].src != server {
		t.Errorf("REQ from %v, REP from %v", mads[0].src, mads[1].src)
	}
	req, rep := checkExchange(t, hs, ms, firstRC)
	ip := checkREQ(t, req, 7174)
	if ip.SrcPort != 0x845b || req.Primary.FlowLabel != 0x0230b {
		t.Errorf("source port %#x flow label %#x, want 0x845b 0x0230b", ip.SrcPort, req.Primary.FlowLabel)
	}
	// rping's conn_param: responder resources 1, initiator depth 1.
	if req.ResponderResources != 1 || req.InitiatorDepth != 1 || req.LocalQPN != 0x1e || rep.LocalQPN != 0x1e {
		t.Errorf("REQ rr %d id %d qpn %#x, REP qpn %#x", req.ResponderResources, req.InitiatorDepth, req.LocalQPN, rep.LocalQPN)
	}
	if req.StartingPSN != 0x268ac8 || rep.StartingPSN != 0xf0686f {
		t.Errorf("PSNs REQ %#x REP %#x", req.StartingPSN, rep.StartingPSN)
	}
	checkDisconnect(t, ms[3], ms[4], req, rep)
}

// TestGoldenWriteBW decodes the CM MADs of ib_write_bw -R: two connections
// to perftest's port 18515 (the second carries the test: its QPN 0x20 on
// both sides is the .txt's "QPN 0x0020"; perftest prints PSNs of its own
// that rdma_cm does not use), then both torn down.
func TestGoldenWriteBW(t *testing.T) {
	mads, firstRC := rxeCapture(t, "rdmacm_write_bw")
	hs, ms := decodeAll(t, "rdmacm_write_bw", mads)
	if len(ms) != 10 {
		t.Fatalf("%d MADs, want 10", len(ms))
	}
	req1, rep1 := checkExchange(t, hs[0:3], ms[0:3], firstRC)
	req2, rep2 := checkExchange(t, hs[3:6], ms[3:6], nil)
	for _, req := range []*rdmacm.REQ{req1, req2} {
		checkREQ(t, req, 18515)
		if req.ResponderResources != 0 || req.InitiatorDepth != 0 {
			t.Errorf("REQ rr %d id %d, want 0 0 (write_bw -R)", req.ResponderResources, req.InitiatorDepth)
		}
	}
	if req1.LocalQPN != 0x1f || rep1.LocalQPN != 0x1f || req2.LocalQPN != 0x20 || rep2.LocalQPN != 0x20 {
		t.Errorf("QPNs %#x/%#x and %#x/%#x, want 0x1f/0x1f and 0x20/0x20", req1.LocalQPN, rep1.LocalQPN, req2.LocalQPN, rep2.LocalQPN)
	}
	// Teardown: the second connection first, then the first; each DREQ
	// carries its connection's TID.
	checkDisconnect(t, ms[6], ms[7], req2, rep2)
	checkDisconnect(t, ms[8], ms[9], req1, rep1)
	if hs[6].TID != hs[3].TID || hs[8].TID != hs[0].TID {
		t.Errorf("DREQ TIDs %#x %#x, want %#x %#x", hs[6].TID, hs[8].TID, hs[3].TID, hs[0].TID)
	}
}
