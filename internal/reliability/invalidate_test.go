package reliability

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// TestSendWithInvalidateRegularMR: a SEND with Invalidate naming the R_Key
// of an ordinary registered region must not withdraw it. In rxe only
// fast-registration MRs (IB_MR_TYPE_MEM_REG) and memory windows can be
// invalidated remotely; rxe_invalidate_mr refuses a region from ibv_reg_mr and
// the responder fails the SEND as class J: the receive WQE completes with
// IBV_WC_REM_INV_REQ_ERR and the QP goes to Error, while the requester, whose
// SEND was acknowledged, sees IBV_WC_SUCCESS. xdproce does the same for any
// region not registered with mr.RemoteInvalidate (its stand-in for
// ibv_alloc_mr regions), so a peer granted an R_Key cannot revoke it for every
// other peer sharing the region.
func TestSendWithInvalidateRegularMR(t *testing.T) {
	a, b, _, _ := newPipePair(t, pipe.Config{})
	pdA, pdB := a.AllocPD(), b.AllocPD()
	shared := make([]byte, 64)
	sm, _ := pdB.RegMR(shared, roce.LocalWrite|roce.RemoteWrite)
	rb := make([]byte, 64)
	rm, _ := pdB.RegMR(rb, roce.LocalWrite)
	src := make([]byte, 64)
	am, _ := pdA.RegMR(src, roce.LocalWrite)
	o := roce.DefaultConnectOptions()
	o.Timeout = 10
	mallory := connectPair(t, pdA, pdB, nil, nil, 4, &o)
	honest := connectPair(t, pdA, pdB, nil, nil, 4, &o)
	if err := mallory.y.PostRecv(roce.RecvWR{ID: 1, SGL: sgeOf(rm, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := mallory.x.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSendInv, Flags: qp.Signaled, SGL: sgeOf(am, 0, 8),
		InvRKey: sm.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, mallory.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
		t.Errorf("sender's WC for a refused SEND with Invalidate: %v, want %v (rxe acknowledges it)", wc.Status, qp.WCSuccess)
	}
	if wc := wait1(t, mallory.ycq, 5*time.Second); wc.ID != 1 || wc.Status != qp.WCRemInvReqErr {
		t.Errorf("receiver's WC for a SEND with Invalidate of an ordinary region: %+v, want ID 1 %v", wc, qp.WCRemInvReqErr)
	}
	if st := mallory.y.State(); st != qp.Error {
		t.Errorf("receiving QP after a refused SEND with Invalidate: %v, want %v", st, qp.Error)
	}
	if err := honest.x.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: sgeOf(am, 0, 8),
		RemoteAddr: sm.Addr(), RKey: sm.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, honest.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
		t.Errorf("another peer's WRITE with the region's R_Key after the SEND with Invalidate: %v (the R_Key was revoked)", wc.Status)
	}
}
