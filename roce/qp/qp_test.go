package qp

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/roce/mr"
)

func TestSendRecvBasic(t *testing.T) {
	p := newPair(t, defaultOpts())
	src, sb := p.a.reg(t, 100, allAcc)
	dst, db := p.b.reg(t, 200, allAcc)
	fill(sb, 3)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 7, SGL: []mr.SGE{sge(dst, 0, 200)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 9, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(src, 0, 100)}}))
	wa := p.poll(p.a, 1)
	wb := p.poll(p.b, 1)
	if d := cmp.Diff([]WC{{ID: 9, Status: WCSuccess, Opcode: WCSend, ByteLen: 100, QPN: 0x11}}, wa); d != "" {
		t.Errorf("send WC (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]WC{{ID: 7, Status: WCSuccess, Opcode: WCRecv, ByteLen: 100, QPN: 0x12, SrcQPN: 0x11}}, wb); d != "" {
		t.Errorf("recv WC (-want +got):\n%s", d)
	}
	if !bytes.Equal(db[:100], sb) {
		t.Fatal("payload differs")
	}
}
