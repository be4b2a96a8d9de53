package roce_test

import (
	"testing"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// FuzzCMInput feeds arbitrary MADs from QP1 at addrA to a device listening
// on port 7174 (RDMA_PS_TCP) and UDP port 7175 (SIDR): nothing panics, and
// once the requests that reached the listeners are rejected the CM agent
// holds no connection and no pending SIDR request (a malformed MAD is
// dropped or answered, never left half-open); the kept SIDR answers stay
// within their bound.
func FuzzCMInput(f *testing.F) {
	var mad [rdmacm.MADLen]byte
	req := &rdmacm.REQ{LocalCommID: 7, ServiceID: rdmacm.ServiceID(rdmacm.PSTCP, 7174), LocalQPN: 0x11,
		StartingPSN: 5, PathMTU: 3, RemoteCMResponseTimeout: 14, LocalCMResponseTimeout: 14, MaxCMRetries: 2}
	if err := (rdmacm.IPHeader{SrcPort: 40000, Src: addrA, Dst: addrB}).Put(req.PrivateData[:], []byte("hi")); err != nil {
		f.Fatal(err)
	}
	sidr := &rdmacm.SIDRReq{RequestID: 9, PKey: 0xFFFF, ServiceID: rdmacm.ServiceID(rdmacm.PSUDP, 7175)}
	if err := (rdmacm.IPHeader{SrcPort: 40001, Src: addrA, Dst: addrB}).Put(sidr.PrivateData[:], []byte("ud")); err != nil {
		f.Fatal(err)
	}
	for _, m := range []rdmacm.Message{req, &rdmacm.REP{LocalCommID: 1, RemoteCommID: 2}, &rdmacm.RTU{}, &rdmacm.MRA{},
		&rdmacm.REJ{Reason: rdmacm.RejTimeout}, &rdmacm.DREQ{RemoteCommID: 3}, &rdmacm.DREP{}, &rdmacm.LAP{},
		&rdmacm.APR{}, &rdmacm.SIDRReq{}, &rdmacm.SIDRRep{}, sidr, &rdmacm.SIDRRep{RequestID: 9, QPN: 0x12, QKey: 5}} {
		if _, err := rdmacm.Encode(mad[:], rdmacm.CMHeader(0x100000007), m); err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte(nil), mad[:]...))
	}
	f.Add([]byte("short"))
	p, _, _ := newPipeDevices(f, pipe.Config{})
	l, err := p.b.ListenCM(7174, &roce.CMOptions{ResponseTimeout: 10, MaxRetries: 1})
	if err != nil {
		f.Fatal(err)
	}
	ul, err := p.b.ListenSIDR(7175)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := p.b.CMInput(addrA, data); err != nil {
			t.Fatal(err)
		}
		// CMInput handed the MAD over before it returned: a request it
		// made waits in its listener's backlog already.
		for r, ok := ul.Pending(); ok; r, ok = ul.Pending() {
			if err := r.Reject(nil); err != nil {
				t.Fatal(err)
			}
		}
		if pending, kept, dialing := p.b.CMSIDR(); pending+dialing != 0 || kept > 256 {
			t.Fatalf("SIDR: %d pending, %d kept, %d dialing after %x", pending, kept, dialing, data)
		}
		for r, ok := l.Pending(); ok; r, ok = l.Pending() {
			if err := r.Reject(nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := p.b.CMConns(); n != 0 {
			t.Fatalf("%d connections left after %x", n, data)
		}
	})
}
