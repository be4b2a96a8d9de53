package reliability

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// TestPrivilegedDestroyIdle: QP.Destroy on an idle device over AF_XDP
// returns (it waits for two engine rounds; an idle engine sleeps in the
// link's Wait without a timeout, so each round needs a wake-up).
func TestPrivilegedDestroyIdle(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	a, b := openXSK(t, topo.A), openXSK(t, topo.B)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	src := make([]byte, 64)
	sm, _ := pdA.RegMR(src, roce.LocalWrite)
	dst := make([]byte, 64)
	dm, _ := pdB.RegMR(dst, roce.LocalWrite|roce.RemoteWrite)
	for i := range 5 {
		c := connectPair(t, pdA, pdB, nil, nil, 4, nil)
		if err := c.x.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: sgeOf(sm, 0, 64),
			RemoteAddr: dm.Addr(), RKey: dm.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := wait1(t, c.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
			t.Fatal(wc.Status)
		}
		time.Sleep(20 * time.Millisecond) // both engines asleep
		for _, q := range []*roce.QP{c.x, c.y} {
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- q.Destroy() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("round %d: Destroy took %v", i, time.Since(start))
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: Destroy of an idle queue pair has not returned after 5 s", i)
			}
		}
	}
}
