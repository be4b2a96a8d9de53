package enlarge_test

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/enlarge"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// Two devices joined by an in-memory link, one connection, one channel end on
// each side: a 5000-byte message makes the sending direction promote from
// the 512-byte ring to the 8 KiB buffer.
func Example() {
	la, lb, _ := pipe.New(pipe.Config{})
	ipA, ipB := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	da, _ := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{ipA}})
	defer da.Close()
	db, _ := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{ipB}})
	defer db.Close()

	type end struct {
		pd *roce.PD
		cq *roce.CQ
		qp *roce.QP
		ch *enlarge.Channel
	}
	var cfg enlarge.Config // defaults: 4 × 512 B ring (16 once a burst needs it), ladder 512 B → 8 KiB → 128 KiB
	send, recv, cqDepth, _ := cfg.QueueDepths()
	mk := func(d *roce.Device) *end {
		e := &end{pd: d.AllocPD()}
		e.cq, _ = d.CreateCQ(cqDepth)
		e.qp, _ = e.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: send, MaxRecvWR: recv})
		return e
	}
	a, b := mk(da), mk(db)
	gid := func(ip netip.Addr) netip.Addr { return netip.AddrFrom16(ip.As16()) }
	a.qp.Connect(0x100, roce.Endpoint{QPN: b.qp.QPN(), PSN: 0x200, GID: gid(ipB)}, nil)
	b.qp.Connect(0x200, roce.Endpoint{QPN: a.qp.QPN(), PSN: 0x100, GID: gid(ipA)}, nil)

	for _, e := range []*end{a, b} {
		v := enlarge.NewVerbs(e.qp, e.pd, e.cq, nil)
		pool, _ := enlarge.NewPool(v, 32, 512) // shared by every channel of the PD
		e.ch, _ = enlarge.New(v, pool, &cfg)
	}
	a.ch.Connect(b.ch.Endpoint()) // exchanged out of band in real life
	b.ch.Connect(a.ch.Endpoint())

	fmt.Println("registered at start:", a.ch.Stats().RegisteredBytes, "B")
	msg := bytes.Repeat([]byte("x"), 5000)
	go a.ch.Write(msg)
	buf := make([]byte, 10000)
	n, err := b.ch.Read(buf)
	fmt.Println("read", n, "B, error", err)
	s := a.ch.Stats()
	fmt.Println("sender:", s.SendState, "phase", s.SendPhase, "promotions", s.Promotions, "control messages", s.ControlSent)
	fmt.Println("receiver registered:", b.ch.Stats().RegisteredBytes, "B")
	// Output:
	// registered at start: 2144 B
	// read 5000 B, error <nil>
	// sender: large phase 1 promotions 1 control messages 1
	// receiver registered: 8288 B
}
