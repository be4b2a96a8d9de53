package xfer

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedTeardownXSK: over AF_XDP, where an idle device's engine
// sleeps until a frame or a wake-up, closing a connected, idle queue pair
// (roce's QP.Destroy, which needs the engine to run two more rounds) returns
// within 250 ms with the queue pair gone, each of three times.
func TestPrivilegedTeardownXSK(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	open := func(i *netlab.Iface) *roce.Device {
		var d *roce.Device
		if err := i.NS.Do(func() (err error) {
			d, err = roce.Open(i.Name, &roce.Options{Link: roce.LinkXSK})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	a, b := open(topo.A), open(topo.B)
	for i := range 3 {
		qa, err := newQPConn(a, roce.RC, 4096, 1, roce.LocalWrite, nil)
		if err != nil {
			t.Fatal(err)
		}
		qb, err := newQPConn(b, roce.RC, 4096, 1, roce.LocalWrite, nil)
		if err != nil {
			t.Fatal(err)
		}
		ma, mb := &message{}, &message{}
		qa.endpoint(ma)
		qb.endpoint(mb)
		if err := qa.connect(mb, nil); err != nil {
			t.Fatal(err)
		}
		if err := qb.connect(ma, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // let both engines go to sleep
		start := time.Now()
		qa.close()
		if d := time.Since(start); d > 250*time.Millisecond {
			t.Errorf("round %d: teardown took %v", i, d)
		}
		qb.close()
		if na, nb := a.Stats().QPs, b.Stats().QPs; na != 0 || nb != 0 {
			t.Fatalf("round %d: queue pairs alive: %d, %d", i, na, nb)
		}
	}
}
