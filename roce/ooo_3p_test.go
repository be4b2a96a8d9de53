package roce_test

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestOOO3PSource: a device's OOO queue pair as a third-party source
// through the facade. The hand-driven end of the pipe plays the controller
// (QPN oooPeerQPN, the queue pair's peer) and the sink (QPN 0x99, same
// address): after AdmitSink, a request streams OOO_3P_WRITE frames to the
// sink carrying the source's bytes and the controller's XTP; a request
// naming a sink not admitted, or one revoked, gets nothing and is counted.
func TestOOO3PSource(t *testing.T) {
	s := newOOOTarget(t, 3, 4)
	fill(s.buf[:5000], 9)
	const sinkQPN = 0x99
	sink := roce.MakeCtx(7, 1)
	req := func(tid, qpn uint32) []byte {
		p := wire.Packet{SrcIP: addrA, DstIP: addrB, TTL: 64, SrcPort: 0xC000, DstPort: wire.UDPPort,
			BTH: wire.BTH{Opcode: wire.OOO3PReadReq, PKey: 0xFFFF, DestQPN: s.qp.QPN()},
			XRH: wire.XRH{Ctx: s.ctx[0], TID: tid, Total: 5000, Initiator: oooPeerCtx, Notify: roce.NotifyInitiator,
				Seg: roce.MTU1024, Tag: 0x3B},
			RETH:          wire.RETH{VA: s.mr.Addr(), RKey: s.mr.RKey(), DMALen: 5000},
			XRR:           wire.XRR{VA: 0x5000, RKey: 0x5151},
			XTPTarget:     wire.XTP{GID: addrA.As16(), QPN: qpn, Ctx: sink},
			XTPController: wire.XTP{GID: addrA.As16(), QPN: oooPeerQPN, Ctx: oooPeerCtx}}
		b := make([]byte, 512)
		n, err := p.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		return b[:n]
	}
	// Not admitted yet.
	s.inject([][]byte{req(1, sinkQPN)})
	if ps := s.replies(); len(ps) != 0 || s.qp.Stats().OOO.ThirdPartyRefused != 1 {
		t.Fatalf("before AdmitSink: %d frames, refused %d", len(ps), s.qp.Stats().OOO.ThirdPartyRefused)
	}
	if err := s.qp.AdmitSink(roce.GIDFromIP(addrA), sinkQPN); err != nil {
		t.Fatal(err)
	}
	s.inject([][]byte{req(2, sinkQPN)})
	ps := s.replies()
	if len(ps) != 5 {
		t.Fatalf("%d frames for 5000 bytes in 1024-byte segments", len(ps))
	}
	got := make([]byte, 5000)
	for i := range ps {
		p := &ps[i]
		if p.BTH.Opcode != wire.OOO3PWrite || p.BTH.DestQPN != sinkQPN || p.XRH.Ctx != sink || p.XRH.TID != 2 ||
			p.XTPController.QPN != oooPeerQPN || p.XTPController.Ctx != oooPeerCtx || p.RETH.RKey != 0x5151 {
			t.Fatalf("frame %d: %v to qpn %#x ctx %v tid %d controller %#x", i, p.BTH.Opcode, p.BTH.DestQPN, p.XRH.Ctx, p.XRH.TID, p.XTPController.QPN)
		}
		copy(got[p.RETH.VA-0x5000:], p.Payload)
	}
	if !bytes.Equal(got, s.buf[:5000]) {
		t.Fatal("the streamed bytes differ from the source's")
	}
	// Another sink QPN, then the admitted one revoked.
	s.qp.RevokeSink(roce.GIDFromIP(addrA), sinkQPN)
	s.inject([][]byte{req(3, sinkQPN+1), req(4, sinkQPN)})
	if ps := s.replies(); len(ps) != 0 || s.qp.Stats().OOO.ThirdPartyRefused != 3 {
		t.Fatalf("unadmitted and revoked: %d frames, refused %d", len(ps), s.qp.Stats().OOO.ThirdPartyRefused)
	}
	if n := len(wcs(t, s.rcq)) + len(wcs(t, s.scq)); n != 0 {
		t.Fatalf("the source has %d completions", n)
	}
	// Only OOO queue pairs take sinks.
	rc, err := s.dev.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.scq, RecvCQ: s.rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.AdmitSink(roce.GIDFromIP(addrA), sinkQPN); err == nil {
		t.Fatal("an RC queue pair admitted a sink")
	}
}
