package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// mwEnv is an RC connection over a pipe whose y side has windows bound to
// its buffer (registered with MWBind).
type mwEnv struct {
	t    *testing.T
	p    *devPair
	x, y *side
	id   uint64
}

func newMWEnv(t *testing.T) *mwEnv {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	acc := roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic | roce.MWBind
	x, y := connectRC(t, p, connCfg{access: acc, bufSize: 1 << 16})
	fill(x.buf, 1)
	return &mwEnv{t: t, p: p, x: x, y: y, id: 100}
}

// addr is the IOVA of y's buffer at off.
func (e *mwEnv) addr(off int) uint64 { return e.y.mr.Addr() + uint64(off) }

// bind2B binds the type 2B window w on y's queue pair with rkey and returns
// the bind's completion status.
func (e *mwEnv) bind2B(w *roce.MW, rkey uint32, off, n int, acc roce.Access) roce.WCStatus {
	e.t.Helper()
	e.id++
	info := roce.BindInfo{MR: e.y.mr, Addr: e.addr(off), Length: uint64(n), Access: acc}
	if err := e.y.qp.PostSend(roce.SendWR{ID: e.id, Opcode: roce.WRBindMW, Flags: roce.Signaled,
		Bind: roce.BindWR{MW: w, RKey: rkey, Info: info}}); err != nil {
		e.t.Fatal(err)
	}
	return e.ownWC(roce.WCBindMW)
}

// ownWC waits for y's next send completion, checks its id and opcode, and
// returns its status.
func (e *mwEnv) ownWC(op roce.WCOpcode) roce.WCStatus {
	e.t.Helper()
	wc := waitWC(e.t, e.y.scq)
	if wc.ID != e.id || wc.Opcode != op {
		e.t.Fatalf("completion %+v, want id %d opcode %v", wc, e.id, op)
	}
	return wc.Status
}

// remote runs one x operation on y's memory (WRITE from x.buf[0:n], READ to
// x.buf[1<<15:], fetch-and-add of 8 bytes) and returns its status.
func (e *mwEnv) remote(s *side, op roce.WROpcode, rkey uint32, va uint64, n int) roce.WCStatus {
	e.t.Helper()
	e.id++
	wr := roce.SendWR{ID: e.id, Opcode: op, Flags: roce.Signaled, RemoteAddr: va, RKey: rkey,
		SGL: []roce.SGE{s.sge(0, n)}, CompareAdd: 1}
	if op != roce.WRRDMAWrite {
		wr.SGL = []roce.SGE{s.sge(1<<15, n)}
	}
	if err := s.qp.PostSend(wr); err != nil {
		e.t.Fatal(err)
	}
	wc := waitWC(e.t, s.scq)
	if wc.ID != e.id {
		e.t.Fatalf("completion %+v, want id %d", wc, e.id)
	}
	return wc.Status
}

func (e *mwEnv) want(what string, got, want roce.WCStatus) {
	e.t.Helper()
	if got != want {
		e.t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// bound2B allocates a type 2B window and binds it (first key after the
// allocation's) to y's buffer at off.
func (e *mwEnv) bound2B(off, n int, acc roce.Access) (*roce.MW, uint32) {
	e.t.Helper()
	w := e.alloc(roce.MWType2B)
	k := roce.IncRKey(w.RKey())
	e.want("bind", e.bind2B(w, k, off, n, acc), roce.WCSuccess)
	return w, k
}

func (e *mwEnv) alloc(typ roce.MWType) *roce.MW {
	e.t.Helper()
	w, err := e.y.pd.AllocMW(typ)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// secondQP connects another queue pair of y's PD to a new queue pair on x's
// device.
func (e *mwEnv) secondQP() (x2, y2 *side) {
	t := e.t
	x2 = newSide(t, e.p.a, roce.RC, connCfg{bufSize: 1 << 16}, 0x500)
	y2 = &side{dev: e.y.dev, pd: e.y.pd, scq: e.y.scq, rcq: e.y.rcq, buf: e.y.buf, mr: e.y.mr, psn: 0x600}
	var err error
	if y2.qp, err = e.y.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.y.scq, RecvCQ: e.y.rcq}); err != nil {
		t.Fatal(err)
	}
	o := roce.DefaultConnectOptions()
	if err := x2.qp.Connect(x2.psn, y2.endpoint(t), &o); err != nil {
		t.Fatal(err)
	}
	if err := y2.qp.Connect(y2.psn, x2.endpoint(t), &o); err != nil {
		t.Fatal(err)
	}
	return x2, y2
}

// TestMemoryWindowsPipe: windows of both types over link/pipe, each case on
// a fresh connection (a remote access error ends it).
func TestMemoryWindowsPipe(t *testing.T) {
	const rwa = roce.RemoteRead | roce.RemoteWrite | roce.RemoteAtomic
	for _, tc := range []struct {
		name string
		run  func(e *mwEnv)
	}{
		{"2B write, read and atomic inside", func(e *mwEnv) {
			_, k := e.bound2B(4096, 4096, rwa)
			e.want("write", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(4096+10), 100), roce.WCSuccess)
			if !bytes.Equal(e.y.buf[4096+10:4096+110], e.x.buf[:100]) {
				e.t.Fatal("WRITE through the window: data differs")
			}
			e.want("read", e.remote(e.x, roce.WRRDMARead, k, e.addr(4096), 4096), roce.WCSuccess)
			if !bytes.Equal(e.x.buf[1<<15:1<<15+4096], e.y.buf[4096:8192]) {
				e.t.Fatal("READ through the window: data differs")
			}
			e.want("fetch-add", e.remote(e.x, roce.WRAtomicFetchAdd, k, e.addr(8192-8), 8), roce.WCSuccess)
		}},
		{"2B outside the window (inside the region)", func(e *mwEnv) {
			_, k := e.bound2B(4096, 4096, rwa)
			before := bytes.Clone(e.y.buf)
			e.want("write across the end", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(8192-5), 10), roce.WCRemAccessErr)
			if !bytes.Equal(before, e.y.buf) {
				e.t.Fatal("a refused WRITE changed memory")
			}
		}},
		{"2B read before the window", func(e *mwEnv) {
			_, k := e.bound2B(4096, 4096, rwa)
			e.want("read", e.remote(e.x, roce.WRRDMARead, k, e.addr(4095), 2), roce.WCRemAccessErr)
		}},
		{"2B access the window does not grant", func(e *mwEnv) {
			_, k := e.bound2B(0, 4096, roce.RemoteRead)
			e.want("read", e.remote(e.x, roce.WRRDMARead, k, e.addr(0), 64), roce.WCSuccess)
			e.want("atomic", e.remote(e.x, roce.WRAtomicFetchAdd, k, e.addr(0), 8), roce.WCRemAccessErr)
		}},
		{"2B zero-based", func(e *mwEnv) {
			_, k := e.bound2B(1000, 200, rwa|roce.ZeroBased)
			e.want("write at 0", e.remote(e.x, roce.WRRDMAWrite, k, 0, 200), roce.WCSuccess)
			if !bytes.Equal(e.y.buf[1000:1200], e.x.buf[:200]) {
				e.t.Fatal("zero-based WRITE: data differs")
			}
			e.want("write at the region's IOVA", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(1000), 1), roce.WCRemAccessErr)
		}},
		{"2B local invalidate revokes", func(e *mwEnv) {
			w, k := e.bound2B(0, 4096, rwa)
			e.want("write", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCSuccess)
			e.id++
			if err := e.y.qp.PostSend(roce.SendWR{ID: e.id, Opcode: roce.WRLocalInv, Flags: roce.Signaled, InvRKey: k}); err != nil {
				e.t.Fatal(err)
			}
			e.want("local invalidate", e.ownWC(roce.WCLocalInv), roce.WCSuccess)
			if w.Bound() {
				e.t.Fatal("window still bound after LOCAL_INV")
			}
			e.want("write after", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCRemAccessErr)
		}},
		{"2B SEND_WITH_INV revokes", func(e *mwEnv) {
			_, k := e.bound2B(0, 4096, rwa)
			if err := e.y.qp.PostRecv(roce.RecvWR{ID: 7, SGL: []roce.SGE{e.y.sge(1<<15, 64)}}); err != nil {
				e.t.Fatal(err)
			}
			e.id++
			if err := e.x.qp.PostSend(roce.SendWR{ID: e.id, Opcode: roce.WRSendInv, Flags: roce.Signaled, InvRKey: k,
				SGL: []roce.SGE{e.x.sge(0, 64)}}); err != nil {
				e.t.Fatal(err)
			}
			e.want("send with invalidate", waitWC(e.t, e.x.scq).Status, roce.WCSuccess)
			if wc := waitWC(e.t, e.y.rcq); wc.Status != roce.WCSuccess || !wc.WithInv || wc.ImmData != k {
				e.t.Fatalf("receive completion %+v, want the invalidated rkey %#x", wc, k)
			}
			e.want("write after", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCRemAccessErr)
		}},
		{"2B rebind with a new key", func(e *mwEnv) {
			w := e.alloc(roce.MWType2B)
			k1 := roce.IncRKey(w.RKey())
			e.want("bind", e.bind2B(w, k1, 0, 4096, rwa), roce.WCSuccess)
			e.id++
			if err := e.y.qp.PostSend(roce.SendWR{ID: e.id, Opcode: roce.WRLocalInv, InvRKey: k1}); err != nil {
				e.t.Fatal(err)
			}
			k2 := roce.IncRKey(k1) // the bind after the unsignaled invalidation runs in order
			e.want("rebind", e.bind2B(w, k2, 8192, 4096, rwa), roce.WCSuccess)
			e.want("write, new key", e.remote(e.x, roce.WRRDMAWrite, k2, e.addr(8192), 64), roce.WCSuccess)
			e.want("write, old key", e.remote(e.x, roce.WRRDMAWrite, k1, e.addr(0), 64), roce.WCRemAccessErr)
		}},
		{"2B through another queue pair of the PD", func(e *mwEnv) {
			_, k := e.bound2B(0, 4096, rwa)
			x2, _ := e.secondQP()
			e.want("write through the bound QP", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCSuccess)
			e.want("write through another QP", e.remote(x2, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCRemAccessErr)
		}},
		{"2B bound twice", func(e *mwEnv) {
			w, k := e.bound2B(0, 4096, rwa)
			e.want("second bind", e.bind2B(w, roce.IncRKey(k), 0, 4096, rwa), roce.WCMWBindErr)
			if err := e.y.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRBindMW}); err == nil {
				e.t.Fatal("IBV_WR_BIND_MW without a window posted")
			}
		}},
		{"type 1 bind, rebind, old key refused", func(e *mwEnv) {
			w := e.alloc(roce.MWType1)
			e.id++
			k1, err := e.y.qp.BindMW(w, e.id, roce.Signaled, roce.BindInfo{MR: e.y.mr, Addr: e.addr(0), Length: 4096, Access: rwa})
			if err != nil {
				e.t.Fatal(err)
			}
			e.want("bind", e.ownWC(roce.WCBindMW), roce.WCSuccess)
			if w.RKey() != k1 {
				e.t.Fatalf("window rkey %#x, BindMW said %#x", w.RKey(), k1)
			}
			e.want("write", e.remote(e.x, roce.WRRDMAWrite, k1, e.addr(100), 64), roce.WCSuccess)
			e.id++
			k2, err := e.y.qp.BindMW(w, e.id, roce.Signaled, roce.BindInfo{MR: e.y.mr, Addr: e.addr(4096), Length: 4096, Access: rwa})
			if err != nil {
				e.t.Fatal(err)
			}
			e.want("rebind", e.ownWC(roce.WCBindMW), roce.WCSuccess)
			if k2 == k1 || k2>>8 != k1>>8 {
				e.t.Fatalf("rebind rkey %#x after %#x", k2, k1)
			}
			e.want("write, new key", e.remote(e.x, roce.WRRDMAWrite, k2, e.addr(4096), 64), roce.WCSuccess)
			e.want("write, old key", e.remote(e.x, roce.WRRDMAWrite, k1, e.addr(100), 64), roce.WCRemAccessErr)
		}},
		{"type 1 is not invalidated by SEND_WITH_INV", func(e *mwEnv) {
			w := e.alloc(roce.MWType1)
			e.id++
			k, err := e.y.qp.BindMW(w, e.id, roce.Signaled, roce.BindInfo{MR: e.y.mr, Addr: e.addr(0), Length: 4096, Access: rwa})
			if err != nil {
				e.t.Fatal(err)
			}
			e.want("bind", e.ownWC(roce.WCBindMW), roce.WCSuccess) // bound before the SEND arrives
			if err := e.y.qp.PostRecv(roce.RecvWR{ID: 7, SGL: []roce.SGE{e.y.sge(1<<15, 64)}}); err != nil {
				e.t.Fatal(err)
			}
			if err := e.x.qp.PostSend(roce.SendWR{ID: 8, Opcode: roce.WRSendInv, InvRKey: k,
				SGL: []roce.SGE{e.x.sge(0, 64)}}); err != nil {
				e.t.Fatal(err)
			}
			if wc := waitWC(e.t, e.y.rcq); wc.ID != 7 || wc.Status != roce.WCRemInvReqErr {
				e.t.Fatalf("receive completion %+v, want IBV_WC_REM_INV_REQ_ERR", wc)
			}
			if !w.Bound() || w.RKey() != k {
				e.t.Fatal("a refused SEND_WITH_INV unbound the type 1 window")
			}
		}},
		{"type 1 LOCAL_INV fails", func(e *mwEnv) {
			w := e.alloc(roce.MWType1)
			k, err := e.y.qp.BindMW(w, 5, 0, roce.BindInfo{MR: e.y.mr, Addr: e.addr(0), Length: 64, Access: roce.RemoteRead})
			if err != nil {
				e.t.Fatal(err)
			}
			e.id++
			if err := e.y.qp.PostSend(roce.SendWR{ID: e.id, Opcode: roce.WRLocalInv, InvRKey: k}); err != nil {
				e.t.Fatal(err)
			}
			e.want("local invalidate", e.ownWC(roce.WCLocalInv), roce.WCLocQPOpErr)
		}},
		{"type rules at post", func(e *mwEnv) {
			w1, w2 := e.alloc(roce.MWType1), e.alloc(roce.MWType2B)
			info := roce.BindInfo{MR: e.y.mr, Addr: e.addr(0), Length: 64, Access: roce.RemoteRead}
			if err := e.y.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRBindMW,
				Bind: roce.BindWR{MW: w1, RKey: roce.IncRKey(w1.RKey()), Info: info}}); err == nil {
				e.t.Fatal("a type 1 window bound through PostSend")
			}
			if _, err := e.y.qp.BindMW(w2, 1, 0, info); err == nil {
				e.t.Fatal("a type 2B window bound through BindMW")
			}
			if err := e.y.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRBindMW,
				Bind: roce.BindWR{MW: w2, RKey: w2.RKey() ^ 0x100, Info: info}}); err == nil {
				e.t.Fatal("a bind with an rkey of another window posted")
			}
			zb := info
			zb.Access |= roce.ZeroBased
			if _, err := e.y.qp.BindMW(w1, 1, 0, zb); err == nil {
				e.t.Fatal("a zero-based type 1 bind posted")
			}
			other, err := e.x.pd.RegMR(make([]byte, 64), roce.LocalWrite|roce.MWBind)
			if err != nil {
				e.t.Fatal(err)
			}
			if _, err := e.y.qp.BindMW(w1, 1, 0, roce.BindInfo{MR: other, Addr: other.Addr(), Length: 8}); !errors.Is(err, roce.ErrPDMismatch) {
				e.t.Fatalf("bind to a region of another PD: %v", err)
			}
		}},
		{"dealloc revokes; a region with windows stays", func(e *mwEnv) {
			w, k := e.bound2B(0, 4096, rwa)
			if err := e.y.mr.Deregister(); !errors.Is(err, roce.ErrBound) {
				e.t.Fatalf("deregister with a window bound: %v", err)
			}
			if err := w.Dealloc(); err != nil {
				e.t.Fatal(err)
			}
			e.want("write after dealloc", e.remote(e.x, roce.WRRDMAWrite, k, e.addr(0), 64), roce.WCRemAccessErr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(newMWEnv(t)) })
	}
}
