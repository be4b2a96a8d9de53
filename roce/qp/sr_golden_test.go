package qp

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// srGoldenPair is two RC queue pairs with selective repeat (deterministic
// keys, fixed IOVAs), a 64 KiB region each.
func srGoldenPair(t *testing.T) (*pair, *mr.MR, *mr.MR, []byte, []byte) {
	o := defaultOpts()
	o.sr, o.txBufs = true, 64
	p := newPair(t, o)
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	ma, err := p.a.pd.RegisterIOVA(bufA, 0x7f00_1000_0000, allAcc)
	must(t, err)
	mb, err := p.b.pd.RegisterIOVA(bufB, 0x7f00_2000_0000, allAcc)
	must(t, err)
	return p, ma, mb, bufA, bufB
}

// TestGoldenSR builds the selective-repeat golden captures (B's view) from
// what the engines send and compares them byte for byte
// (testdata/pcaps/sr-*.pcapng and .txt):
//   - sr-write-hole: a 4-packet WRITE whose 2nd packet is lost: B holds
//     the 3rd and 4th and SACKs (missing the 2nd), A resends only the
//     2nd, B places it and the held ones and ACKs the last;
//   - sr-send-holes: a 6-packet SEND with the 2nd and 4th lost: one SACK
//     names both holes, A resends exactly those two, the receive completes
//     once, after the last hole is filled.
func TestGoldenSR(t *testing.T) {
	for _, c := range []struct {
		name string
		op   WROpcode
		n    int   // bytes (1024-byte packets)
		lost []int // packets lost the first time
	}{
		{"sr-write-hole", WRRDMAWrite, 4000, []int{1}},
		{"sr-send-holes", WRSend, 6000, []int{1, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ma, mb, bufA, bufB := srGoldenPair(t)
			fill(bufA[:c.n], 9)
			if c.op == WRSend {
				must(t, p.b.q.PostRecv(&RecvWR{ID: 5, SGL: []mr.SGE{sge(mb, 0, 8192)}}))
			}
			must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: c.op, Flags: Signaled, SGL: []mr.SGE{sge(ma, 0, c.n)},
				RemoteAddr: mb.Addr(), RKey: mb.RKey()}))
			rec := &capRec{name: c.name}
			first := sent(p.a, p.now)
			var arrive [][]byte
			for i, f := range first {
				if !bytesIn(i, c.lost) {
					arrive = append(arrive, f)
				}
			}
			rec.add(capture.DirInbound, arrive...)
			sack := hand(t, p.b, p.now, arrive...)
			var sp wire.Packet
			if len(sack) != 1 || sp.DecodeWith(sack[0], wire.AcceptSR) != nil || sp.BTH.Opcode != wire.SRSack {
				t.Fatalf("B answered with %d frames, want one SR_SACK", len(sack))
			}
			rec.add(capture.DirOutbound, sack...)
			if k, _ := p.b.cq.Poll(make([]WC, 4)); k != 0 {
				t.Fatalf("B completed %d receives before the holes were filled", k)
			}
			resend := hand(t, p.a, p.now, sack...)
			if len(resend) != len(c.lost) {
				t.Fatalf("A resent %d frames, want %d (only the holes)", len(resend), len(c.lost))
			}
			for i, f := range resend {
				if !sameButAckReq(f, first[c.lost[i]]) {
					t.Fatalf("resend %d is not packet %d again", i, c.lost[i])
				}
			}
			rec.add(capture.DirInbound, resend...)
			ack := hand(t, p.b, p.now, resend...)
			rec.add(capture.DirOutbound, ack...)
			hand(t, p.a, p.now, ack...)
			if !bytes.Equal(bufB[:c.n], bufA[:c.n]) {
				t.Fatal("the bytes that landed differ")
			}
			if wcs := p.poll(p.a, 1); wcs[0].Status != WCSuccess {
				t.Fatalf("A: %+v", wcs[0])
			}
			if c.op == WRSend {
				if wcs := p.poll(p.b, 1); wcs[0].Status != WCSuccess || wcs[0].ByteLen != uint32(c.n) {
					t.Fatalf("B: %+v", wcs[0])
				}
			}
			rec.check(t, "veth-b")
		})
	}
}

func bytesIn(i int, s []int) bool {
	for _, x := range s {
		if x == i {
			return true
		}
	}
	return false
}

// sameButAckReq: b is a with the AckReq bit set (and so another ICRC).
func sameButAckReq(a, b []byte) bool {
	var pa, pb wire.Packet
	if pa.Decode(a) != nil || pb.Decode(b) != nil {
		return false
	}
	pa.BTH.AckReq = pb.BTH.AckReq
	return pa.BTH == pb.BTH && bytes.Equal(pa.Payload, pb.Payload) && pa.RETH == pb.RETH
}
