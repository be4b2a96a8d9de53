package daemon

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce/wire"
)

// madFrame encodes a CM MAD m (transaction ID tid) from QP1 at src to QP1
// at dst.
func madFrame(t testing.TB, src, dst netip.Addr, tid uint64, m rdmacm.Message) []byte {
	var mad [rdmacm.MADLen]byte
	if _, err := rdmacm.Encode(mad[:], rdmacm.CMHeader(tid), m); err != nil {
		t.Fatal(err)
	}
	p := wire.Packet{SrcMAC: [6]byte{0x02, 9, 9, 9, 9, 9}, SrcIP: src, DstIP: dst, TTL: 64,
		SrcPort: 49152, DstPort: 4791, Payload: mad[:]}
	p.BTH.Opcode, p.BTH.DestQPN, p.BTH.PKey = wire.UDSendOnly, 1, 0xFFFF
	p.DETH = wire.DETH{QKey: wire.GSIQKey, SrcQPN: 1}
	b := make([]byte, qp1FrameMax)
	n, err := p.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// decodeMAD decodes the CM message of a QP1 frame.
func decodeMAD(t *testing.T, f []byte) (wire.Packet, rdmacm.Header, rdmacm.Message) {
	t.Helper()
	var p wire.Packet
	if err := p.Decode(f); err != nil {
		t.Fatal(err)
	}
	if p.BTH.Opcode != wire.UDSendOnly || p.BTH.DestQPN != 1 || p.DETH.SrcQPN != 1 || p.DETH.QKey != wire.GSIQKey {
		t.Fatalf("not a QP1 MAD: opcode %v dqpn %#x sqpn %#x qkey %#x", p.BTH.Opcode, p.BTH.DestQPN, p.DETH.SrcQPN, p.DETH.QKey)
	}
	h, m, err := rdmacm.Decode(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return p, h, m
}

// TestCMSteering: REQs reach the client that took their service ID (one
// client per ID), the other CM messages the client whose communication IDs
// contain the receiver's; MADs no client takes are answered as Linux's CM
// answers them (REJ invalid service ID, REJ invalid comm ID, DREP), to the
// wire or to the local client that sent them; a client's QP1 may send only
// MADs carrying its own communication IDs; a departed client's service IDs
// are free.
func TestCMSteering(t *testing.T) {
	s := newTestSwitch(t)
	d := s.d
	a, aEnd := s.addClient(t, 1)
	b, bEnd := s.addClient(t, 2)
	if a.commFirst != 0x100000 || a.commLast != 0x1fffff || b.commFirst != 0x200000 {
		t.Fatalf("communication IDs: a %#x..%#x, b from %#x", a.commFirst, a.commLast, b.commFirst)
	}
	if f, _ := d.commRange(0); f != 1 {
		t.Errorf("block 0's communication IDs start at %#x, want 1 (0 is no ID)", f)
	}
	sid := rdmacm.ServiceID(rdmacm.PSTCP, 7471)
	if err := d.listen(b, sid); err != nil {
		t.Fatal(err)
	}
	if err := d.listen(a, sid); err == nil || !strings.Contains(err.Error(), "taken by client 2") {
		t.Fatalf("a took b's service ID: %v", err)
	}
	if err := d.unlisten(a, sid); err == nil {
		t.Fatal("a gave back b's service ID")
	}
	none := func(name string) {
		t.Helper()
		if got := recv(aEnd); len(got) != 0 {
			t.Errorf("%s: a got %d frames", name, len(got))
		}
		if got := recv(bEnd); len(got) != 0 {
			t.Errorf("%s: b got %d frames", name, len(got))
		}
		if got := s.wireFrames(t); len(got) != 0 {
			t.Errorf("%s: %d frames to the wire", name, len(got))
		}
	}
	only := func(name string, end *shm.Link, want []byte) {
		t.Helper()
		got := recv(end)
		if len(got) != 1 || !bytes.Equal(got[0], want) {
			t.Errorf("%s: %d frames, want the one byte-exact", name, len(got))
		}
		none(name)
	}

	req := &rdmacm.REQ{LocalCommID: 0x77, ServiceID: sid, TransportService: rdmacm.TransportRC, PathMTU: 3, PKey: 0xFFFF}
	f := madFrame(t, remoteIP, localIP, 5, req)
	d.fromWire(f)
	only("REQ from the wire", bEnd, f)

	f = madFrame(t, remoteIP, localIP, 6, &rdmacm.REP{LocalCommID: 0x88, RemoteCommID: a.commFirst + 5})
	d.fromWire(f)
	only("REP to a's comm ID", aEnd, f)
	f = madFrame(t, remoteIP, localIP, 7, &rdmacm.RTU{LocalCommID: 0x88, RemoteCommID: b.commLast})
	d.fromWire(f)
	only("RTU to b's comm ID", bEnd, f)
	f = madFrame(t, remoteIP, localIP, 7, &rdmacm.SIDRRep{RequestID: a.commFirst, ServiceID: sid})
	d.fromWire(f)
	only("SIDR_REP to a's request ID", aEnd, f)

	// Answered by the daemon.
	for _, tc := range []struct {
		name string
		in   rdmacm.Message
		want func(rdmacm.Message) bool
	}{
		{"REQ to no listener", &rdmacm.REQ{LocalCommID: 0x99, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, 9)},
			func(m rdmacm.Message) bool {
				r, ok := m.(*rdmacm.REJ)
				return ok && r.RemoteCommID == 0x99 && r.Reason == rdmacm.RejInvalidServiceID && r.MessageRejected == rdmacm.MsgREQ
			}},
		{"REP to a departed client's comm ID", &rdmacm.REP{LocalCommID: 0xaa, RemoteCommID: 0x500001},
			func(m rdmacm.Message) bool {
				r, ok := m.(*rdmacm.REJ)
				return ok && r.RemoteCommID == 0xaa && r.Reason == rdmacm.RejInvalidCommID
			}},
		{"DREQ to a departed client's comm ID", &rdmacm.DREQ{LocalCommID: 0xbb, RemoteCommID: 0x500001},
			func(m rdmacm.Message) bool { r, ok := m.(*rdmacm.DREP); return ok && r.RemoteCommID == 0xbb }},
		{"SIDR_REQ to no listener", &rdmacm.SIDRReq{RequestID: 0xcc, ServiceID: rdmacm.ServiceID(rdmacm.PSUDP, 9)},
			func(m rdmacm.Message) bool {
				r, ok := m.(*rdmacm.SIDRRep)
				return ok && r.RequestID == 0xcc && r.Status == rdmacm.SIDRUnsupported
			}},
	} {
		before := d.st.cmAnswered.Load()
		d.fromWire(madFrame(t, remoteIP, localIP, 0x1234, tc.in))
		out := s.wireFrames(t)
		if len(out) != 1 {
			t.Errorf("%s: %d frames to the wire, want the answer", tc.name, len(out))
			continue
		}
		p, h, m := decodeMAD(t, out[0])
		if p.DstIP != remoteIP || p.SrcIP != localIP || p.SrcMAC != localMAC || p.DstMAC != [6]byte{0x02, 9, 9, 9, 9, 9} ||
			h.TID != 0x1234 || !tc.want(m) || d.st.cmAnswered.Load() != before+1 {
			t.Errorf("%s: answered %v to %v (tid %#x)", tc.name, m, p.DstIP, h.TID)
		}
		none(tc.name)
	}
	before := d.st.dropQP1.Load()
	d.fromWire(madFrame(t, remoteIP, localIP, 1, &rdmacm.RTU{LocalCommID: 1, RemoteCommID: 0x500001}))
	if d.st.dropQP1.Load() != before+1 {
		t.Error("an RTU for nobody was not counted dropped")
	}
	none("RTU for nobody")

	// From a client.
	f = madFrame(t, localIP, remoteIP, 8, &rdmacm.REQ{LocalCommID: a.commFirst + 9, ServiceID: sid})
	d.fromClient(a, f)
	out := s.wireFrames(t)
	want := bytes.Clone(f)
	copy(want[6:12], localMAC[:])
	if len(out) != 1 || !bytes.Equal(out[0], want) {
		t.Errorf("a's REQ: %d frames to the wire, want the one with the interface's MAC", len(out))
	}
	none("a's REQ")
	f = madFrame(t, localIP, localIP, 8, &rdmacm.REQ{LocalCommID: a.commFirst + 9, ServiceID: sid})
	d.fromClient(a, f)
	only("a's REQ to b's service", bEnd, f)
	d.fromClient(a, madFrame(t, localIP, localIP, 8, &rdmacm.REQ{LocalCommID: a.commFirst + 10, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, 9)}))
	got := recv(aEnd)
	if len(got) != 1 {
		t.Fatalf("a's REQ to no listener: a got %d frames, want the REJ", len(got))
	}
	if _, _, m := decodeMAD(t, got[0]); m.(*rdmacm.REJ).RemoteCommID != a.commFirst+10 {
		t.Errorf("a's REQ to no listener answered %v", m)
	}
	none("a's REQ to no listener")
	for _, tc := range []struct {
		name string
		f    []byte
		ctr  func() uint64
	}{
		{"REQ with b's comm ID", madFrame(t, localIP, remoteIP, 8, &rdmacm.REQ{LocalCommID: b.commFirst, ServiceID: sid}), a.dropForeign.Load},
		{"DREQ with b's comm ID", madFrame(t, localIP, localIP, 8, &rdmacm.DREQ{LocalCommID: b.commFirst, RemoteCommID: b.commFirst}), a.dropForeign.Load},
		{"REQ from another address", madFrame(t, remoteIP, localIP, 8, &rdmacm.REQ{LocalCommID: a.commFirst, ServiceID: sid}), a.dropBadSource.Load},
		{"not a CM MAD", func() []byte {
			f := madFrame(t, localIP, localIP, 8, &rdmacm.RTU{LocalCommID: a.commFirst, RemoteCommID: b.commFirst})
			p := wire.Packet{}
			if err := p.Decode(f); err != nil {
				t.Fatal(err)
			}
			p.Payload[1] = 0x81 // another management class
			n, _ := p.Encode(f)
			return f[:n]
		}(), a.dropMalformed.Load},
		{"a MAD cut short", madFrame(t, localIP, localIP, 8, &rdmacm.RTU{LocalCommID: a.commFirst, RemoteCommID: b.commFirst})[:200], a.dropMalformed.Load},
	} {
		before := tc.ctr()
		d.fromClient(a, tc.f)
		if tc.ctr() != before+1 {
			t.Errorf("%s: counter %d, want %d", tc.name, tc.ctr(), before+1)
		}
		none(tc.name)
	}
	// REJ and DREP with no local ID: answers for connections a lacks.
	f = madFrame(t, localIP, localIP, 8, &rdmacm.REJ{RemoteCommID: b.commFirst, Reason: rdmacm.RejInvalidCommID})
	d.fromClient(a, f)
	only("a's REJ without a comm ID", bEnd, f)

	d.dropServices(b)
	d.fromWire(madFrame(t, remoteIP, localIP, 5, req))
	if out := s.wireFrames(t); len(out) != 1 {
		t.Errorf("REQ to a departed client's service: %d frames to the wire, want the REJ", len(out))
	}
	none("REQ to a departed client's service")
	if err := d.listen(a, sid); err != nil {
		t.Errorf("a departed client's service ID: %v", err)
	}
}

// TestControlRequests: requests a client cannot make are refused with a
// reason, and the client stays.
func TestControlRequests(t *testing.T) {
	s := newTestSwitch(t)
	a, _ := s.addClient(t, 1)
	for _, tc := range []struct{ msg, want string }{
		{`garbage`, "malformed request"},
		{`{"op":"fly"}`, `unknown request "fly"`},
		{`{"op":"join","group":"198.51.100.7"}`, "neither a multicast address"},
		{`{"op":"join","group":"nonsense"}`, "ParseAddr"},
		{`{"op":"leave","group":"239.1.1.1"}`, "not a member"},
		{`{"op":"unlisten","service_id":5}`, "not this client's"},
		{`{"op":"listen","service_id":5}`, ""},
		{`{"op":"listen","service_id":5}`, ""},
		{`{"op":"unlisten","service_id":5}`, ""},
	} {
		r := s.d.control(a, []byte(tc.msg), nil)
		if tc.want == "" && r.Error != "" || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: %q, want %q", tc.msg, r.Error, tc.want)
		}
	}
	for i := range maxServices {
		if err := s.d.listen(a, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.d.listen(a, 1<<40); err == nil {
		t.Errorf("a client took %d service IDs", maxServices+1)
	}
}
