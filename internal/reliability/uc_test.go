package reliability

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// TestUCConnect: roce.QP.Connect takes a UC queue pair to RTS (it must leave
// out the RC-only attributes), and a UC WRITE lands.
func TestUCConnect(t *testing.T) {
	a, b, _, _ := newPipePair(t, pipe.Config{})
	pdA, pdB := a.AllocPD(), b.AllocPD()
	cqA, _ := a.CreateCQ(4)
	cqB, _ := b.CreateCQ(4)
	x, err := pdA.CreateQP(roce.QPConfig{Type: roce.UC, SendCQ: cqA, RecvCQ: cqA})
	if err != nil {
		t.Fatal(err)
	}
	y, err := pdB.CreateQP(roce.QPConfig{Type: roce.UC, SendCQ: cqB, RecvCQ: cqB})
	if err != nil {
		t.Fatal(err)
	}
	ga, _ := a.GID(1)
	gb, _ := b.GID(1)
	if err := x.Connect(7, roce.Endpoint{QPN: y.QPN(), PSN: 9, GID: gb}, nil); err != nil {
		t.Fatalf("UC connect: %v", err)
	}
	if err := y.Connect(9, roce.Endpoint{QPN: x.QPN(), PSN: 7, GID: ga}, nil); err != nil {
		t.Fatalf("UC connect: %v", err)
	}
	src := []byte("unreliable connected write")
	sm, _ := pdA.RegMR(src, roce.LocalWrite)
	dst := make([]byte, len(src))
	dm, _ := pdB.RegMR(dst, roce.LocalWrite|roce.RemoteWrite)
	if err := x.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: sgeOf(sm, 0, len(src)),
		RemoteAddr: dm.Addr(), RKey: dm.RKey()}); err != nil {
		t.Fatal(err)
	}
	// A SEND behind the WRITE: its receive completion orders the check
	// after the WRITE landed.
	rb := make([]byte, 16)
	rm, _ := pdB.RegMR(rb, roce.LocalWrite)
	if err := y.PostRecv(roce.RecvWR{ID: 2, SGL: sgeOf(rm, 0, 16)}); err != nil {
		t.Fatal(err)
	}
	if err := x.PostSend(roce.SendWR{ID: 3, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: sgeOf(sm, 0, 4)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if wc := wait1(t, cqA, 5*time.Second); wc.Status != qp.WCSuccess {
			t.Fatalf("UC send side: %v", wc.Status)
		}
	}
	if wc := wait1(t, cqB, 5*time.Second); wc.Status != qp.WCSuccess || wc.ByteLen != 4 {
		t.Fatalf("UC receive: %+v", wc)
	}
	if !bytes.Equal(dst, src) {
		t.Fatalf("UC WRITE did not land: %q", dst)
	}
}
