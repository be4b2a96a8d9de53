package am_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/am"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// Two roce devices joined by link/pipe. On each: an RC queue pair under an
// Endpoint, and a second queue pair for reference RDMA WRITEs (the Endpoint
// polls its completion queue alone).
type end struct {
	dev   *roce.Device
	pd    *roce.PD
	qp    *roce.QP
	ep    *am.Endpoint
	refQP *roce.QP
	refCQ *roce.CQ
}

type pair struct {
	a, b *end
}

var ips = [2]netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")}

func gid(ip netip.Addr) netip.Addr { return netip.AddrFrom16(ip.As16()) }

func newPair(tb testing.TB, cfg am.Config) *pair {
	tb.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	send, recv, cqd, err := cfg.QueueDepths()
	if err != nil {
		tb.Fatal(err)
	}
	var ends [2]*end
	var qps, refs [2]*roce.QP
	var cqs [2]*roce.CQ
	for i, l := range []*pipe.Link{la, lb} {
		d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{ips[i]}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { d.Close() })
		e := &end{dev: d, pd: d.AllocPD()}
		if cqs[i], err = d.CreateCQ(cqd); err != nil {
			tb.Fatal(err)
		}
		if qps[i], err = e.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cqs[i], RecvCQ: cqs[i], MaxSendWR: send, MaxRecvWR: recv}); err != nil {
			tb.Fatal(err)
		}
		if e.refCQ, err = d.CreateCQ(16); err != nil {
			tb.Fatal(err)
		}
		if refs[i], err = e.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.refCQ, RecvCQ: e.refCQ}); err != nil {
			tb.Fatal(err)
		}
		e.refQP, e.qp = refs[i], qps[i]
		ends[i] = e
	}
	for i := range 2 {
		j := 1 - i
		for _, c := range [][2]*roce.QP{{qps[i], qps[j]}, {refs[i], refs[j]}} {
			if err := c[0].Connect(0x100*uint32(i+1), roce.Endpoint{QPN: c[1].QPN(), PSN: 0x100 * uint32(j+1), GID: gid(ips[j])}, nil); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for i, e := range ends {
		var err error
		if e.ep, err = am.New(qps[i], e.pd, cqs[i], &cfg); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { qps[i].Destroy(); e.ep.Close() })
	}
	return &pair{a: ends[0], b: ends[1]}
}

// drive calls both endpoints' Progress until every handle is done.
func (p *pair) drive(tb testing.TB, hs ...*am.Handle) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		done := true
		for _, h := range hs {
			done = done && h.Done()
		}
		if done {
			return
		}
		for _, e := range []*end{p.a, p.b} {
			if err := e.ep.Progress(); err != nil {
				tb.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			tb.Fatal("operations did not complete in 20 s")
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// refWriter RDMA-WRITEs data from a's staging buffer into b's reference
// buffer, as plain RDMA would.
type refWriter struct {
	p        *pair
	src, dst *roce.MR
	ref      []byte
}

func newRefWriter(tb testing.TB, p *pair, ref []byte) *refWriter {
	tb.Helper()
	w := &refWriter{p: p, ref: ref}
	var err error
	if w.src, err = p.a.pd.RegMR(make([]byte, len(ref)), roce.LocalWrite); err != nil {
		tb.Fatal(err)
	}
	if w.dst, err = p.b.pd.RegMR(ref, roce.LocalWrite|roce.RemoteWrite); err != nil {
		tb.Fatal(err)
	}
	return w
}

func (w *refWriter) write(tb testing.TB, off int, data []byte) {
	tb.Helper()
	if len(data) == 0 {
		return
	}
	copy(w.src.Bytes(), data)
	err := w.p.a.refQP.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL:        []roce.SGE{{Addr: w.src.Addr(), Length: uint32(len(data)), LKey: w.src.LKey()}},
		RemoteAddr: w.dst.Addr() + uint64(off), RKey: w.dst.RKey()})
	if err != nil {
		tb.Fatal(err)
	}
	wcs := make([]roce.WC, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := w.p.a.refCQ.Wait(ctx, wcs); err != nil || n != 1 || wcs[0].Status != roce.WCSuccess {
		tb.Fatalf("reference RDMA WRITE: %d completions, %v, %v", n, err, wcs[0].Status)
	}
}
