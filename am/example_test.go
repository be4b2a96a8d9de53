package am_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/xdproce/xdproce/am"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// RDMA semantics without handing the peer a key: b exposes a window by id,
// a writes and reads it by offset. The small write travels in the request;
// the large one b pulls with an RDMA READ of a's buffer, registered for that
// one operation. A range outside the window is refused.
func ExampleEndpoint() {
	la, lb, _ := pipe.New(pipe.Config{})
	ipA, ipB := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	cfg := am.Config{Inline: 1024}
	send, recv, cqDepth, _ := cfg.QueueDepths()
	mk := func(l *pipe.Link, ip netip.Addr) (*roce.Device, *roce.PD, *roce.CQ, *roce.QP) {
		d, _ := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{ip}})
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(cqDepth)
		q, _ := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: send, MaxRecvWR: recv})
		return d, pd, cq, q
	}
	da, pdA, cqA, qA := mk(la, ipA)
	defer da.Close()
	db, pdB, cqB, qB := mk(lb, ipB)
	defer db.Close()
	gid := func(ip netip.Addr) netip.Addr { return netip.AddrFrom16(ip.As16()) }
	qA.Connect(0x100, roce.Endpoint{QPN: qB.QPN(), PSN: 0x200, GID: gid(ipB)}, nil)
	qB.Connect(0x200, roce.Endpoint{QPN: qA.QPN(), PSN: 0x100, GID: gid(ipA)}, nil)
	a, _ := am.New(qA, pdA, cqA, &cfg)
	b, _ := am.New(qB, pdB, cqB, &cfg)

	window := make([]byte, 64<<10)
	b.Expose(7, window) // registered for local access only; b never tells its keys

	// Both ends make progress only when asked to.
	wait := func(h *am.Handle) error {
		for !h.Done() {
			a.Progress()
			b.Progress()
			runtime.Gosched()
		}
		return h.Err()
	}
	small := bytes.Repeat([]byte("s"), 100)
	large := bytes.Repeat([]byte("L"), 10000)
	h, _ := a.Write(7, 0, small)
	fmt.Println("write 100 B:", wait(h))
	h, _ = a.Write(7, 1000, large)
	fmt.Println("write 10000 B:", wait(h))
	got := make([]byte, 10000)
	h, _ = a.Read(7, 1000, got)
	fmt.Println("read 10000 B:", wait(h), bytes.Equal(got, large))
	h, _ = a.Write(7, 65500, small)
	fmt.Println("write past the end:", wait(h))
	sa, sb := a.Stats(), b.Stats()
	fmt.Println("a registered", sa.TagRegistered, "tagged buffers; b did", sb.RMAReads, "RDMA READ and", sb.RMAWrites, "RDMA WRITE")
	// Output:
	// write 100 B: <nil>
	// write 10000 B: <nil>
	// read 10000 B: <nil> true
	// write past the end: am: write window 7 [0xffdc, +100): outside the window
	// a registered 2 tagged buffers; b did 1 RDMA READ and 1 RDMA WRITE
}
