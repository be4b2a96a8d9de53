package ooo_test

import (
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// end is one side of a lane: device, CQs, OOO queue pair, registered buffer.
type end struct {
	dev      *roce.Device
	scq, rcq *roce.CQ
	qp       *roce.QP
	mr       *roce.MR
}

// lanePair is one lane: two devices joined by a pipe, an OOO queue pair on
// each, connected, the target holding nctx contexts for the initiator.
type lanePair struct {
	la, lb *pipe.Link
	a, b   end
	ctxs   []roce.Ctx
}

const linkMTU = 4200 // OOO segments of 4096 bytes

// newLane builds a lane whose initiator buffer is src and target buffer dst
// (each registered on its side's device), the pipe with cfg, and n the
// third octet of its addresses (lanes of one test differ).
func newLane(t *testing.T, cfg pipe.Config, src, dst []byte, nctx int, n byte) *lanePair {
	t.Helper()
	if cfg.MTU == 0 {
		cfg.MTU = linkMTU
	}
	la, lb, err := pipe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &lanePair{la: la, lb: lb}
	p.a = newEnd(t, la, netip.AddrFrom4([4]byte{198, 51, 100, 2*n + 1}), src, 0)
	p.b = newEnd(t, lb, netip.AddrFrom4([4]byte{198, 51, 100, 2*n + 2}), dst, 1)
	for _, c := range [][2]*end{{&p.a, &p.b}, {&p.b, &p.a}} {
		gid, err := c[1].dev.GID(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := c[0].qp.Connect(0, roce.Endpoint{QPN: c[1].qp.QPN(), GID: gid}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if p.ctxs, err = p.b.qp.AcquireContexts(nctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// newEnd makes a device on l with address ip, its buffer and OOO queue
// pair; skip queue pairs are created first so that the two ends' QPNs
// differ.
func newEnd(t *testing.T, l *pipe.Link, ip netip.Addr, buf []byte, skip int) end {
	t.Helper()
	d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{ip}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e := end{dev: d}
	pd := d.AllocPD()
	if e.scq, err = d.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	for range skip {
		if _, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.scq, RecvCQ: e.rcq}); err != nil {
			t.Fatal(err)
		}
	}
	if e.mr, err = pd.RegMR(buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.OOO, SendCQ: e.scq, RecvCQ: e.rcq, MaxSendWR: 256, MaxRecvWR: 16}); err != nil {
		t.Fatal(err)
	}
	return e
}

// lane is the initiator's view of p for a Writer.
func (p *lanePair) lane() ooo.Lane {
	return ooo.Lane{QP: p.a.qp, CQ: p.a.scq,
		Local:  ooo.Region{Addr: p.a.mr.Addr(), LKey: p.a.mr.LKey(), RKey: p.a.mr.RKey()},
		Remote: ooo.Target{Ctxs: p.ctxs, VA: p.b.mr.Addr(), RKey: p.b.mr.RKey()}}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*13+i>>9) + seed
	}
}
