package rdmacm_test

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm/rdmacm"
)

// eachFrame calls fn with every frame of testdata/rxe/NAME.pcap, read with
// capture's reader, numbered from 1.
func eachFrame(tb testing.TB, name string, fn func(index int, f *capture.Frame)) {
	tb.Helper()
	f, err := os.Open("../../testdata/rxe/" + name + ".pcap")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var fr capture.Frame
	for i := 1; ; i++ {
		if err := r.Next(&fr); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			tb.Fatal(err)
		}
		fn(i, &fr)
	}
}

// xdproceMessages returns one message of every type as xdproce would build
// them for an exchange between 198.51.100.1 (active, QPN 0x11) and
// 198.51.100.2 (passive, QPN 0x12) on port 7174, with every field set, and
// last a REQ between 2001:db8::a and 2001:db8::b.
func xdproceMessages(t testing.TB) []rdmacm.Message {
	t.Helper()
	a, b := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	req := &rdmacm.REQ{
		LocalCommID: 0x11223344, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, 7174), LocalCAGUID: 0x020000fffe00000a,
		LocalQPN: 0x000011, ResponderResources: 4, InitiatorDepth: 4, RemoteCMResponseTimeout: 20,
		TransportService: rdmacm.TransportRC, StartingPSN: 0xabcdef, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: 0xFFFF, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: rdmacm.Path{
			LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: netip.AddrFrom16(a.As16()).As16(),
			RemoteGID: netip.AddrFrom16(b.As16()).As16(), FlowLabel: 0x5a5a5, PacketRate: 0x2c,
			TrafficClass: 0x20, HopLimit: 64, SL: 3, LocalACKTimeout: 19,
		},
	}
	if err := (rdmacm.IPHeader{SrcPort: 40000, Src: a, Dst: b}).Put(req.PrivateData[:], []byte("hello from xdproce")); err != nil {
		t.Fatal(err)
	}
	rep := &rdmacm.REP{
		LocalCommID: 0x55667788, RemoteCommID: req.LocalCommID, LocalQPN: 0x000012, StartingPSN: 0x123456,
		ResponderResources: 4, InitiatorDepth: 4, TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: 0x020000fffe00000b,
	}
	copy(rep.PrivateData[:], "accepted")
	sidrReq := &rdmacm.SIDRReq{RequestID: 0x0badcafe, PKey: 0xFFFF, ServiceID: rdmacm.ServiceID(rdmacm.PSUDP, 7174)}
	if err := (rdmacm.IPHeader{SrcPort: 40001, Src: netip.MustParseAddr("2001:db8::a"), Dst: netip.MustParseAddr("2001:db8::b")}).
		Put(sidrReq.PrivateData[:], nil); err != nil {
		t.Fatal(err)
	}
	req6 := &rdmacm.REQ{LocalCommID: 0x66, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, 7174), LocalQPN: 0x14, StartingPSN: 1,
		PathMTU: 3, PKey: 0xFFFF, Primary: rdmacm.Path{LocalGID: [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 0x0a},
			RemoteGID: [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 0x0b}, HopLimit: 64}}
	if err := (rdmacm.IPHeader{SrcPort: 40002, Src: netip.MustParseAddr("2001:db8::a"), Dst: netip.MustParseAddr("2001:db8::b")}).
		Put(req6.PrivateData[:], []byte("v6")); err != nil {
		t.Fatal(err)
	}
	rej := &rdmacm.REJ{LocalCommID: rep.LocalCommID, RemoteCommID: req.LocalCommID, MessageRejected: rdmacm.MsgREQ,
		Reason: rdmacm.RejConsumerDefined}
	copy(rej.PrivateData[:], "go away")
	return []rdmacm.Message{
		req,
		&rdmacm.MRA{LocalCommID: rep.LocalCommID, RemoteCommID: req.LocalCommID, MessageMRAed: rdmacm.MsgREQ, ServiceTimeout: 24},
		rep,
		&rdmacm.RTU{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID},
		&rdmacm.DREQ{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID, RemoteQPN: rep.LocalQPN},
		&rdmacm.DREP{LocalCommID: rep.LocalCommID, RemoteCommID: req.LocalCommID},
		rej,
		&rdmacm.REJ{RemoteCommID: req.LocalCommID, MessageRejected: rdmacm.MsgREQ, Reason: rdmacm.RejTimeout, ARILength: 8,
			ARI: [72]byte{0x02, 0, 0, 0xff, 0xfe, 0, 0, 0x0b}},
		&rdmacm.LAP{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID, RemoteQPN: 0x12, RemoteCMResponseTimeout: 20,
			Alternate: rdmacm.Path{FlowLabel: 0xfffff, TrafficClass: 0xb8, HopLimit: 2, PacketRate: 0x3f, SL: 0xf, SubnetLocal: true, LocalACKTimeout: 0x1f}},
		&rdmacm.APR{LocalCommID: rep.LocalCommID, RemoteCommID: req.LocalCommID, Status: rdmacm.APRUnsupported},
		sidrReq,
		&rdmacm.SIDRRep{RequestID: sidrReq.RequestID, Status: rdmacm.SIDRSuccess, QPN: 0x000013, ServiceID: sidrReq.ServiceID, QKey: 0x01234567},
		req6,
	}
}

// encode encodes m under TID tid or fails t.
func encode(t testing.TB, tid uint64, m rdmacm.Message) []byte {
	t.Helper()
	buf := make([]byte, rdmacm.MADLen)
	if _, err := rdmacm.Encode(buf, rdmacm.CMHeader(tid), m); err != nil {
		t.Fatalf("encode %v: %v", m.AttrID(), err)
	}
	return buf
}
