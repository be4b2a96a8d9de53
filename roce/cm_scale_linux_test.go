package roce_test

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedCMManyConnections: TestCMManyConnections's rounds between
// two devices in two namespaces over a veth (AF_XDP on both ends): 500
// connections (10,000 with -long) established, held at once and torn
// down; afterwards neither CM agent tracks a connection and neither device
// holds a queue pair beyond QP1. The rate is logged, not asserted.
func TestPrivilegedCMManyConnections(t *testing.T) {
	netlab.Privileged(t)
	n := 500
	if *long {
		n = 10_000
	}
	topo := netlab.Pair(t, netlab.LinkConfig{})
	p := &devPair{a: openIn(t, topo.A, roce.Options{Link: roce.LinkXSK}), b: openIn(t, topo.B, roce.Options{Link: roce.LinkXSK})}
	s := newCMScale(t, n, p, topo.B.IPv4)
	p.a.CMConns() // creates a's QP1 (b's came with the listener)
	qps0 := p.a.Stats().QPs + p.b.Stats().QPs
	established, closed := s.round(n, nil)
	t.Logf("%d RDMA CM connections over a veth (AF_XDP), %d at a time: established in %v (%.0f connections/s), all held at once, disconnected and destroyed in %v (%.0f/s)",
		n, cmScaleWorkers, established.Round(time.Millisecond), float64(n)/established.Seconds(), closed.Round(time.Millisecond), float64(n)/closed.Seconds())
	if na, nb := p.a.CMConns(), p.b.CMConns(); na+nb != 0 {
		t.Fatalf("CM agents still track %d and %d connections", na, nb)
	}
	if q := p.a.Stats().QPs + p.b.Stats().QPs; q != qps0 {
		t.Fatalf("devices hold %d queue pairs, %d before the connections", q, qps0)
	}
}
