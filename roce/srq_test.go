package roce_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// srqSide is a receiving device with one SRQ and n queue pairs on it, all
// completing on one receive CQ, and a registered buffer the SRQ's work
// requests point into.
type srqSide struct {
	side
	srq *roce.SRQ
	qps []*roce.QP
}

func newSRQSide(t *testing.T, d *roce.Device, typ roce.QPType, n int, cfg roce.SRQConfig) *srqSide {
	t.Helper()
	s := &srqSide{side: *newSide(t, d, typ, connCfg{}, 0x3000)}
	var err error
	if s.srq, err = s.pd.CreateSRQ(cfg); err != nil {
		t.Fatal(err)
	}
	for range n {
		q, err := s.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq, SRQ: s.srq})
		if err != nil {
			t.Fatal(err)
		}
		s.qps = append(s.qps, q)
	}
	return s
}

// post posts receive work request id for slot id (size bytes at id*size).
func (s *srqSide) post(t *testing.T, id, size int) {
	t.Helper()
	if err := s.srq.PostRecv(roce.RecvWR{ID: uint64(id), SGL: []roce.SGE{s.sge(id*size, size)}}); err != nil {
		t.Fatal(err)
	}
}

// connectSRQ connects senders on p.a to each of r's queue pairs (RC).
func connectSRQ(t *testing.T, p *devPair, r *srqSide, o *roce.ConnectOptions) []*side {
	t.Helper()
	var xs []*side
	for i, q := range r.qps {
		x := newSide(t, p.a, roce.RC, connCfg{bufSize: 1 << 16}, uint32(0x100*(i+1)))
		gid, err := r.dev.GID(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.qp.Connect(x.psn, roce.Endpoint{QPN: q.QPN(), PSN: r.psn, GID: gid}, o); err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(r.psn, x.endpoint(t), o); err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	return xs
}

func (s *side) send(t *testing.T, id uint64, off, n int) {
	t.Helper()
	if err := s.qp.PostSend(roce.SendWR{ID: id, Opcode: roce.WRSend, Flags: roce.Signaled,
		SGL: []roce.SGE{s.sge(off, n)}}); err != nil {
		t.Fatal(err)
	}
}

// TestSRQFourQPsInterleaved: four RC queue pairs on one SRQ receive SENDs
// their four peers post interleaved (of 1 to 3 packets); every message lands
// byte-exact in the WQE its completion names, the completion names the
// queue pair it arrived on, and each queue pair's messages arrive in order.
func TestSRQFourQPsInterleaved(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	const nQP, perQP, slot = 4, 12, 4096
	r := newSRQSide(t, p.b, roce.RC, nQP, roce.SRQConfig{MaxWR: nQP * perQP, MaxSGE: 1})
	for i := range nQP * perQP {
		r.post(t, i, slot)
	}
	xs := connectSRQ(t, p, r, nil)
	size := func(k, m int) int { return 700 + 900*((k+m)%3) + k } // 1 to 3 packets of 1024
	for m := range perQP {
		for k, x := range xs {
			b := x.buf[m*slot : m*slot+size(k, m)]
			fill(b, byte(17*k+m))
			b[0], b[1] = byte(k), byte(m)
			x.send(t, uint64(m), m*slot, len(b))
		}
	}
	next := make([]int, nQP)
	used := map[uint64]bool{}
	for range nQP * perQP {
		wc := waitWC(t, r.rcq)
		if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCRecv || used[wc.ID] {
			t.Fatalf("completion %+v (ids used %v)", wc, used)
		}
		used[wc.ID] = true
		got := r.buf[int(wc.ID)*slot : int(wc.ID)*slot+int(wc.ByteLen)]
		k, m := int(got[0]), int(got[1])
		if k >= nQP || m != next[k] {
			t.Fatalf("WQE %d holds message %d of sender %d, want message %d", wc.ID, m, k, next[k])
		}
		next[k]++
		if wc.QPN != r.qps[k].QPN() || wc.SrcQPN != xs[k].qp.QPN() {
			t.Fatalf("message of sender %d completed with QPN %#x src %#x, want %#x src %#x",
				k, wc.QPN, wc.SrcQPN, r.qps[k].QPN(), xs[k].qp.QPN())
		}
		if want := xs[k].buf[m*slot : m*slot+size(k, m)]; !bytes.Equal(got, want) {
			t.Fatalf("message %d of sender %d: %d bytes differ from the %d sent", m, k, len(got), len(want))
		}
	}
	for _, x := range xs {
		for range perQP {
			if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
	if n := r.srq.Outstanding(); n != 0 {
		t.Errorf("SRQ has %d WQEs left, want 0", n)
	}
}

// TestSRQUD: two UD queue pairs on one SRQ; datagrams to each land behind
// the GRH area with the right QPN; with the SRQ empty a datagram is dropped.
func TestSRQUD(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	const qkey, slot = 0x11111111, 2048
	r := newSRQSide(t, p.b, roce.UD, 2, roce.SRQConfig{MaxWR: 8})
	for _, q := range r.qps {
		if err := q.Activate(qkey, 0); err != nil {
			t.Fatal(err)
		}
	}
	x := newSide(t, p.a, roce.UD, connCfg{bufSize: 1 << 16}, 0)
	if err := x.qp.Activate(qkey, 0); err != nil {
		t.Fatal(err)
	}
	gid, _ := r.dev.GID(1)
	r.post(t, 0, slot)
	r.post(t, 1, slot)
	for i, q := range r.qps {
		ah, err := x.dev.CreateAH(gid, q.QPN(), qkey)
		if err != nil {
			t.Fatal(err)
		}
		b := x.buf[i*slot : i*slot+100+i]
		fill(b, byte(i+1))
		if err := x.qp.PostSendAH(roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.Signaled,
			SGL: []roce.SGE{x.sge(i*slot, len(b))}}, ah); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, r.rcq)
		if wc.Status != roce.WCSuccess || wc.QPN != q.QPN() || wc.SrcQPN != x.qp.QPN() || wc.ByteLen != uint32(roce.GRHLen+len(b)) {
			t.Fatalf("datagram %d: %+v", i, wc)
		}
		got := r.buf[int(wc.ID)*slot+roce.GRHLen : int(wc.ID)*slot+int(wc.ByteLen)]
		if !bytes.Equal(got, b) {
			t.Fatalf("datagram %d differs", i)
		}
		waitWC(t, x.scq)
	}
	ah, _ := x.dev.CreateAH(gid, r.qps[0].QPN(), qkey)
	if err := x.qp.PostSendAH(roce.SendWR{ID: 9, Opcode: roce.WRSend, SGL: []roce.SGE{x.sge(0, 10)}}, ah); err != nil {
		t.Fatal(err)
	}
	noWC(t, r.rcq, 100*time.Millisecond)
	if s := r.qps[0].Stats(); s.Dropped == 0 {
		t.Errorf("datagram to an empty SRQ: dropped %d, want 1", s.Dropped)
	}
}

// TestSRQEmptyRNR: a SEND to an RC queue pair whose SRQ is empty is
// answered with RNR NAKs and completes once a WQE is posted.
func TestSRQEmptyRNR(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	r := newSRQSide(t, p.b, roce.RC, 1, roce.SRQConfig{MaxWR: 4})
	o := roce.DefaultConnectOptions()
	o.MinRNRTimer = 1 // 0.01 ms
	xs := connectSRQ(t, p, r, &o)
	fill(xs[0].buf[:300], 5)
	xs[0].send(t, 1, 0, 300)
	deadline := time.Now().Add(5 * time.Second)
	for r.qps[0].Stats().RNRNAKsSent < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAKs: %+v", r.qps[0].Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	noWC(t, r.rcq, 10*time.Millisecond)
	r.post(t, 3, 512)
	wc := waitWC(t, r.rcq)
	if wc.Status != roce.WCSuccess || wc.ID != 3 || wc.ByteLen != 300 || !bytes.Equal(r.buf[3*512:3*512+300], xs[0].buf[:300]) {
		t.Fatalf("after posting: %+v", wc)
	}
	if wc := waitWC(t, xs[0].scq); wc.Status != roce.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
	if s := xs[0].qp.Stats(); s.RNRNAKsRecv == 0 {
		t.Errorf("sender counted no RNR NAKs")
	}
}

// TestSRQLimitEvent: with srq_limit 4 armed and 8 WQEs posted, taking four
// raises nothing, the fifth (3 left) raises one SRQ-limit event naming the
// SRQ and disarms it; later takes raise no more until it is armed again.
func TestSRQLimitEvent(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	r := newSRQSide(t, p.b, roce.RC, 1, roce.SRQConfig{MaxWR: 16})
	for i := range 8 {
		r.post(t, i, 256)
	}
	if err := r.srq.ModifyLimit(4); err != nil {
		t.Fatal(err)
	}
	if err := r.srq.ModifyLimit(17); err == nil {
		t.Error("ModifyLimit(17) on a 16-WR SRQ accepted")
	}
	xs := connectSRQ(t, p, r, nil)
	msg := func(n int) {
		for i := range n {
			xs[0].send(t, uint64(i), 0, 64)
			if wc := waitWC(t, r.rcq); wc.Status != roce.WCSuccess {
				t.Fatalf("receive %+v", wc)
			}
		}
	}
	msg(4)
	noEvent(t, p.b, 50*time.Millisecond)
	if r.srq.Limit() != 4 {
		t.Fatalf("limit %d after 4 takes, want still 4", r.srq.Limit())
	}
	msg(1)
	ev, others := waitEvent(t, p.b, roce.EventSRQLimitReached, 5*time.Second)
	if ev.SRQ != r.srq || r.srq.Limit() != 0 || r.srq.Outstanding() != 3 {
		t.Fatalf("event %+v (others %v), limit %d, outstanding %d", ev, others, r.srq.Limit(), r.srq.Outstanding())
	}
	msg(2)
	noEvent(t, p.b, 50*time.Millisecond)
	if err := r.srq.ModifyLimit(2); err != nil {
		t.Fatal(err)
	}
	msg(1) // 0 left < 2
	waitEvent(t, p.b, roce.EventSRQLimitReached, 5*time.Second)
}

// TestSRQLastWQEAndDestroy: a queue pair on an SRQ moved to Error raises one
// last-WQE-reached event; the SRQ keeps its WQEs for the others; destroying
// the SRQ is refused while queue pairs use it; PostRecv on such a queue pair
// and UC on an SRQ are refused.
func TestSRQLastWQEAndDestroy(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	r := newSRQSide(t, p.b, roce.RC, 2, roce.SRQConfig{MaxWR: 4})
	r.post(t, 0, 256)
	xs := connectSRQ(t, p, r, nil)
	if err := r.qps[0].PostRecv(roce.RecvWR{ID: 1}); err == nil {
		t.Error("PostRecv on a queue pair on an SRQ accepted")
	}
	if _, err := r.pd.CreateQP(roce.QPConfig{Type: roce.UC, SendCQ: r.scq, RecvCQ: r.rcq, SRQ: r.srq}); err == nil {
		t.Error("UC queue pair on an SRQ accepted")
	}
	if err := r.qps[0].Modify(&roce.Attr{State: roce.StateError}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	ev, _ := waitEvent(t, p.b, roce.EventQPLastWQEReached, 5*time.Second)
	if ev.QPN != r.qps[0].QPN() {
		t.Fatalf("event %v, want queue pair %#x", ev, r.qps[0].QPN())
	}
	noEvent(t, p.b, 50*time.Millisecond)
	if n := r.srq.Outstanding(); n != 1 {
		t.Fatalf("SRQ holds %d WQEs after a queue pair failed, want 1", n)
	}
	xs[1].send(t, 7, 0, 32) // the other queue pair still receives on it
	if wc := waitWC(t, r.rcq); wc.Status != roce.WCSuccess || wc.QPN != r.qps[1].QPN() {
		t.Fatalf("receive on the other queue pair: %+v", wc)
	}
	if err := r.srq.Destroy(); !errors.Is(err, roce.ErrSRQBusy) {
		t.Fatalf("destroy with queue pairs attached: %v, want ErrSRQBusy", err)
	}
	for _, q := range r.qps {
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.srq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.srq.PostRecv(roce.RecvWR{}); !errors.Is(err, roce.ErrDestroyed) {
		t.Errorf("post after destroy: %v", err)
	}
}

// TestSRQDataPathNoAllocs: posting to an SRQ and receiving a SEND through it (the queue pair
// taking the WQE, the limit checked) allocate nothing.
func TestSRQDataPathNoAllocs(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	r := newSRQSide(t, p.b, roce.RC, 2, roce.SRQConfig{MaxWR: 4})
	xs := connectSRQ(t, p, r, nil)
	if err := r.srq.ModifyLimit(1); err != nil {
		t.Fatal(err)
	}
	wr := roce.SendWR{Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{xs[0].sge(0, 3000)}}
	rwr := roce.RecvWR{ID: 1, SGL: []roce.SGE{r.sge(0, 4096)}}
	var wcs [1]roce.WC
	run := func() {
		if err := r.srq.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		if err := xs[0].qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if n, err := xs[0].scq.Wait(t.Context(), wcs[:]); n != 1 || err != nil || wcs[0].Status != roce.WCSuccess {
			t.Fatalf("completion %+v, %v", wcs[0], err)
		}
		if n, err := r.rcq.Wait(t.Context(), wcs[:]); n != 1 || err != nil || wcs[0].Status != roce.WCSuccess {
			t.Fatalf("receive completion %+v, %v", wcs[0], err)
		}
	}
	for range 200 {
		run()
	}
	if a := testing.AllocsPerRun(500, run); a != 0 {
		t.Errorf("%v allocations per SEND through an SRQ, want 0", a)
	}
}
