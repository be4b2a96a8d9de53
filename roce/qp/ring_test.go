package qp

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// TestRingGrown: a grown ring keeps the WQE of every index from the oldest
// outstanding one on (across the 2^32 wrap of the free-running indices),
// gives the next size indices the fresh WQEs, and uses every WQE once.
func TestRingGrown(t *testing.T) {
	for _, tc := range []struct {
		size int
		from uint32
	}{
		{1, 0}, {1, 7}, {4, 0}, {4, 3}, {4, 0xFFFFFFFE}, {8, 0xFFFFFFFB}, {16, 0x7FFFFFF9}, {1024, 0xFFFFFF00},
	} {
		t.Run(fmt.Sprintf("%d@%#x", tc.size, tc.from), func(t *testing.T) {
			old := make([]int, tc.size)
			r := newRing(old)
			fresh := make([]int, tc.size)
			g := r.grown(tc.from, fresh)
			if g.size() != 2*r.size() {
				t.Fatalf("grown ring of %d slots, want %d", g.size(), 2*r.size())
			}
			n := uint32(tc.size)
			for i := tc.from; i != tc.from+n; i++ {
				if g.at(i) != r.at(i) {
					t.Fatalf("index %#x moved to another WQE", i)
				}
			}
			for k := range n {
				if i := tc.from + n + k; g.at(i) != &fresh[k] {
					t.Fatalf("index %#x: not fresh WQE %d", i, k)
				}
			}
			seen := map[*int]bool{}
			for _, s := range g.slots {
				if s == nil || seen[s] {
					t.Fatalf("slot nil or used twice: %v", g.slots)
				}
				seen[s] = true
			}
		})
	}
}

// setIndices makes e's queue pair (in RESET) count its work requests from
// sq and rq, as if that many had been posted and discarded before.
func setIndices(t *testing.T, e *end, sq, rq uint32) {
	q := e.q
	q.mu.Lock()
	q.sqPost, q.rqPost = sq, rq
	q.sqPosted.Store(sq)
	q.rqPosted.Store(rq)
	q.sqDone.Store(sq)
	q.rqDone.Store(rq)
	q.mu.Unlock()
	must(t, q.Modify(&Attr{State: Reset}, AttrState))
}

// TestRingsGrowAcrossWrap: send and receive rings that start small grow
// (doubling, never past MaxSendWR/MaxRecvWR rounded up) while requests are
// outstanding and their free-running indices cross 2^32; every request
// completes once, in order, with its own bytes.
func TestRingsGrowAcrossWrap(t *testing.T) {
	for _, start := range []uint32{0, 0xFFFFFFF3, 0xFFFFFFFF} {
		t.Run(fmt.Sprintf("%#x", start), func(t *testing.T) {
			o := defaultOpts()
			o.maxWR = 40 // rings of 2 → 4 → 8 → 16 → 32 → 64 slots
			o.noConnect = true
			p := newPair(t, o)
			if got := p.a.q.sq.Load().size(); got != initialRing {
				t.Fatalf("send ring starts with %d slots, want %d", got, initialRing)
			}
			setIndices(t, p.a, start, start)
			setIndices(t, p.b, start+5, start-3)
			p.connect(o)
			const msg = 100
			am, abuf := p.a.reg(t, 64*msg, allAcc)
			bm, bbuf := p.b.reg(t, 64*msg, allAcc)
			id := uint64(0)
			// Bursts of growing and shrinking size: the rings grow while
			// earlier requests are outstanding and the indices wrap.
			for _, burst := range []int{1, 3, 4, 5, 2, 9, 16, 7, 33, 40, 1, 40} {
				for k := range burst {
					must(t, p.b.q.PostRecv(&RecvWR{ID: id + uint64(k), SGL: []mr.SGE{sge(bm, k*msg, msg)}}))
				}
				for k := range burst {
					fill(abuf[k*msg:(k+1)*msg], byte(id)+byte(k))
					must(t, p.a.q.PostSend(&SendWR{ID: id + uint64(k), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, k*msg, msg)}}))
				}
				recv := p.poll(p.b, burst)
				send := p.poll(p.a, burst)
				for k := range burst {
					want := id + uint64(k)
					if r, s := recv[k], send[k]; r.ID != want || r.Status != WCSuccess || r.ByteLen != msg ||
						s.ID != want || s.Status != WCSuccess {
						t.Fatalf("burst %d, request %d: receive %+v, send %+v", burst, want, r, s)
					}
					if !bytes.Equal(bbuf[k*msg:(k+1)*msg], abuf[k*msg:(k+1)*msg]) {
						t.Fatalf("burst %d, request %d: bytes differ", burst, want)
					}
				}
				id += uint64(burst)
				for _, r := range []uint32{p.a.q.sq.Load().size(), p.b.q.rq.Load().size()} {
					if r < uint32(min(burst, 64)) || r > 64 {
						t.Fatalf("after a burst of %d: a ring of %d slots (max 64)", burst, r)
					}
				}
			}
			if a, b := p.a.q.sq.Load().size(), p.b.q.rq.Load().size(); a != 64 || b != 64 {
				t.Fatalf("rings of %d and %d slots after 40 outstanding, want 64", a, b)
			}
			if r := p.a.q.rq.Load().size(); r != initialRing {
				t.Fatalf("a's unused receive ring grew to %d", r)
			}
		})
	}
}

// TestRecvSGEOnFirstUse: receive WQEs that have only held zero-length
// receives carry no SGE buffer; a slot gets one when a receive with an SGL is
// first posted into it, and the SGL (several SGEs) then receives the bytes.
func TestRecvSGEOnFirstUse(t *testing.T) {
	p := newPair(t, defaultOpts())
	const n, msg = 4, 300
	for k := range n {
		must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(k)}))
	}
	for k := range n {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(k), Opcode: WRSend, Flags: Signaled}))
	}
	for _, wc := range p.poll(p.b, n) {
		if wc.Status != WCSuccess || wc.ByteLen != 0 {
			t.Fatalf("zero-length receive: %+v", wc)
		}
	}
	p.poll(p.a, n)
	r := p.b.q.rq.Load()
	for i := range r.size() {
		if b := r.at(i).sglBuf; b != nil {
			t.Fatalf("receive slot %d has an SGE buffer of %d after zero-length receives only", i, len(b))
		}
	}
	am, abuf := p.a.reg(t, n*msg, allAcc)
	bm, bbuf := p.b.reg(t, n*msg, allAcc)
	for k := range n {
		// three SGEs of 100 B each, in reverse order in the buffer
		sgl := []mr.SGE{sge(bm, k*msg+200, 100), sge(bm, k*msg+100, 100), sge(bm, k*msg, 100)}
		must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(10 + k), SGL: sgl}))
	}
	for k := range n {
		fill(abuf[k*msg:(k+1)*msg], byte(k))
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(10 + k), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, k*msg, msg)}}))
	}
	for k, wc := range p.poll(p.b, n) {
		if wc.Status != WCSuccess || wc.ByteLen != msg || wc.ID != uint64(10+k) {
			t.Fatalf("receive %d: %+v", k, wc)
		}
		src, dst := abuf[k*msg:(k+1)*msg], bbuf[k*msg:(k+1)*msg]
		if !bytes.Equal(dst[200:], src[:100]) || !bytes.Equal(dst[100:200], src[100:200]) || !bytes.Equal(dst[:100], src[200:]) {
			t.Fatalf("receive %d: bytes not placed through its three SGEs", k)
		}
	}
	p.poll(p.a, n)
}

// TestSendWQEOOOSlot: only an OOO queue pair's send WQEs carry the OOO
// operation fields, in the slots it started with and in those it grew.
func TestSendWQEOOOSlot(t *testing.T) {
	for _, typ := range []Type{RC, UC, UD, OOO} {
		o := defaultOpts()
		o.typ = typ
		e := newEnd(t, "a", 0x11, o, 1)
		r := e.q.sq.Load()
		r = r.grown(0, e.q.newSendWQEs(int(r.size())))
		for i := range r.size() {
			if has := r.at(i).ooo != nil; has != (typ == OOO) {
				t.Fatalf("%v: send WQE %d has OOO fields: %v", typ, i, has)
			}
		}
	}
}
