package reliability

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// TestSendWithInvalidateRegularMR (known bug, run with -knownbugs): a SEND
// with Invalidate naming the R_Key of an ordinary registered region must not
// withdraw it. In rxe only fast-registration MRs (IB_MR_TYPE_MEM_REG) and
// memory windows can be invalidated remotely; rxe_invalidate_mr refuses a
// region from ibv_reg_mr (-EINVAL, the SEND fails). Here roce/qp's responder
// calls mr.Table.InvalidateRKey for any region of the PD
// (roce/qp/responder.go, respExecute, KindSend with HasIETH), so any peer
// granted an R_Key can revoke it for every other peer sharing the region.
func TestSendWithInvalidateRegularMR(t *testing.T) {
	if !*knownBugs {
		t.Skip("known bug (remote invalidation of ordinary regions); run with -knownbugs")
	}
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
	wc := wait1(t, mallory.xcq, 5*time.Second)
	t.Logf("SEND with Invalidate of an ordinary region's R_Key: %v", wc.Status)
	if err := honest.x.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: sgeOf(am, 0, 8),
		RemoteAddr: sm.Addr(), RKey: sm.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, honest.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
		t.Errorf("another peer's WRITE with the region's R_Key after the SEND with Invalidate: %v (the R_Key was revoked)", wc.Status)
	}
}
