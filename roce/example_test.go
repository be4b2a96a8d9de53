package roce_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// Two devices joined by an in-memory link: connect an RC queue pair on each
// and RDMA WRITE into the peer's memory.
func Example() {
	la, lb, _ := pipe.New(pipe.Config{})
	a, _ := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}})
	defer a.Close()
	b, _ := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}})
	defer b.Close()

	setup := func(d *roce.Device, buf []byte) (*roce.QP, *roce.CQ, *roce.MR) {
		pd := d.AllocPD()
		m, _ := pd.RegMR(buf, roce.LocalWrite|roce.RemoteWrite)
		cq, _ := d.CreateCQ(16)
		q, _ := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		return q, cq, m
	}
	src, dst := []byte("hello over RoCEv2"), make([]byte, 64)
	qa, cqa, ma := setup(a, src)
	qb, _, mb := setup(b, dst)
	gidA, _ := a.GID(1)
	gidB, _ := b.GID(1)
	if err := qa.Connect(1, roce.Endpoint{QPN: qb.QPN(), PSN: 2, GID: gidB}, nil); err != nil {
		fmt.Println(err)
		return
	}
	if err := qb.Connect(2, roce.Endpoint{QPN: qa.QPN(), PSN: 1, GID: gidA}, nil); err != nil {
		fmt.Println(err)
		return
	}
	err := qa.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: ma.Addr(), Length: uint32(len(src)), LKey: ma.LKey()}},
		RemoteAddr: mb.Addr(), RKey: mb.RKey()})
	if err != nil {
		fmt.Println(err)
		return
	}
	wcs := make([]roce.WC, 1)
	cqa.Wait(context.Background(), wcs)
	fmt.Println(gidA, "→", gidB, wcs[0].Status)
	fmt.Printf("%s\n", dst[:len(src)])
	// Output:
	// ::ffff:198.51.100.1 → ::ffff:198.51.100.2 IBV_WC_SUCCESS
	// hello over RoCEv2
}
