package mr_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// fakeQP stands for a queue pair (the engine's *qp.QP).
type fakeQP struct{ n uint32 }

func (q *fakeQP) QPN() uint32 { return q.n }

// mwFixture: a table, a PD, a 4 KiB region at IOVA 0x10000 that windows may
// be bound to, and a queue pair of the PD.
func mwFixture(t *testing.T) (*mr.Table, *mr.PD, *mr.MR, *fakeQP) {
	t.Helper()
	tbl := mr.NewTable(mr.WithRand(newSeeded(7)))
	pd := tbl.AllocPD()
	m, err := pd.RegisterIOVA(make([]byte, 4096), 0x10000, mr.LocalWrite|mr.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	return tbl, pd, m, &fakeQP{0x11}
}

func TestMWBindRules(t *testing.T) {
	rw := mr.RemoteRead | mr.RemoteWrite
	for _, tc := range []struct {
		name string
		typ  mr.MWType
		prep func(tbl *mr.Table, pd *mr.PD, w *mr.MW, m *mr.MR, q *fakeQP) // before the bind under test
		info func(m *mr.MR) mr.BindInfo
		pd   func(pd *mr.PD, tbl *mr.Table) *mr.PD // the binding QP's PD
		key  func(w *mr.MW) uint32
		want error // nil: the bind succeeds
	}{
		{name: "type 2B inside the region", typ: mr.MWType2B},
		{name: "type 1 inside the region", typ: mr.MWType1},
		{name: "type 1 unbind (length 0, no region)", typ: mr.MWType1,
			info: func(*mr.MR) mr.BindInfo { return mr.BindInfo{} }},
		{name: "type 2B length 0", typ: mr.MWType2B, want: mr.ErrOutOfBounds,
			info: func(m *mr.MR) mr.BindInfo { return mr.BindInfo{MR: m, Addr: m.Addr(), Access: rw} }},
		{name: "type 2B bound twice", typ: mr.MWType2B, want: mr.ErrAccess,
			prep: func(tbl *mr.Table, pd *mr.PD, w *mr.MW, m *mr.MR, q *fakeQP) {
				must(t, tbl.BindMW(w, q, pd, mr.IncRKey(w.RKey()), mr.BindInfo{MR: m, Addr: m.Addr(), Length: 8, Access: rw}))
			}},
		{name: "type 2B from a QP of another PD", typ: mr.MWType2B, want: mr.ErrPDMismatch,
			pd: func(_ *mr.PD, tbl *mr.Table) *mr.PD { return tbl.AllocPD() }},
		{name: "region without MW_BIND", typ: mr.MWType2B, want: mr.ErrAccess,
			info: func(m *mr.MR) mr.BindInfo {
				o, _ := m.PD().RegisterIOVA(make([]byte, 64), 0x90000, mr.LocalWrite|mr.RemoteWrite)
				return mr.BindInfo{MR: o, Addr: o.Addr(), Length: 8, Access: rw}
			}},
		{name: "writable window on a read-only region", typ: mr.MWType1, want: mr.ErrAccess,
			info: func(m *mr.MR) mr.BindInfo {
				o, _ := m.PD().RegisterIOVA(make([]byte, 64), 0x90000, mr.MWBind)
				return mr.BindInfo{MR: o, Addr: o.Addr(), Length: 8, Access: mr.RemoteWrite}
			}},
		{name: "read-only window on a read-only region", typ: mr.MWType1,
			info: func(m *mr.MR) mr.BindInfo {
				o, _ := m.PD().RegisterIOVA(make([]byte, 64), 0x90000, mr.MWBind)
				return mr.BindInfo{MR: o, Addr: o.Addr(), Length: 8, Access: mr.RemoteRead}
			}},
		{name: "past the region's end", typ: mr.MWType2B, want: mr.ErrOutOfBounds,
			info: func(m *mr.MR) mr.BindInfo { return mr.BindInfo{MR: m, Addr: m.Addr() + 4000, Length: 97, Access: rw} }},
		{name: "before the region", typ: mr.MWType2B, want: mr.ErrOutOfBounds,
			info: func(m *mr.MR) mr.BindInfo { return mr.BindInfo{MR: m, Addr: m.Addr() - 1, Length: 2, Access: rw} }},
		{name: "zero-based type 1", typ: mr.MWType1, want: mr.ErrAccess,
			info: func(m *mr.MR) mr.BindInfo {
				return mr.BindInfo{MR: m, Addr: m.Addr(), Length: 8, Access: rw | mr.ZeroBased}
			}},
		{name: "unknown window access", typ: mr.MWType2B, want: mr.ErrAccess,
			info: func(m *mr.MR) mr.BindInfo {
				return mr.BindInfo{MR: m, Addr: m.Addr(), Length: 8, Access: mr.LocalWrite}
			}},
		{name: "rkey of another index", typ: mr.MWType2B, want: mr.ErrInvalidKey,
			key: func(w *mr.MW) uint32 { return w.RKey() ^ 0x100 }},
		{name: "deregistered region", typ: mr.MWType2B, want: mr.ErrDeallocated,
			info: func(m *mr.MR) mr.BindInfo {
				o, _ := m.PD().RegisterIOVA(make([]byte, 64), 0x90000, mr.LocalWrite|mr.MWBind)
				must(t, o.Deregister())
				return mr.BindInfo{MR: o, Addr: o.Addr(), Length: 8, Access: rw}
			}},
		{name: "deallocated window", typ: mr.MWType1, want: mr.ErrDeallocated,
			prep: func(_ *mr.Table, _ *mr.PD, w *mr.MW, _ *mr.MR, _ *fakeQP) { must(t, w.Dealloc()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, pd, m, q := mwFixture(t)
			w, err := pd.AllocMW(tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			if tc.prep != nil {
				tc.prep(tbl, pd, w, m, q)
			}
			info := mr.BindInfo{MR: m, Addr: m.Addr() + 64, Length: 128, Access: rw}
			if tc.info != nil {
				info = tc.info(m)
			}
			qpd := pd
			if tc.pd != nil {
				qpd = tc.pd(pd, tbl)
			}
			old := w.RKey()
			key := mr.IncRKey(old)
			if tc.key != nil {
				key = tc.key(w)
			}
			err = tbl.BindMW(w, q, qpd, key, info)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("bind: %v, want %v", err, tc.want)
				}
				if w.RKey() != old {
					t.Fatalf("a failed bind changed the rkey %#x to %#x", old, w.RKey())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.RKey() != key || key>>8 != old>>8 || key == old {
				t.Fatalf("rkey %#x after binding with %#x (was %#x)", w.RKey(), key, old)
			}
			if info.Length == 0 {
				if w.Bound() {
					t.Fatal("unbound window reports Bound")
				}
				if _, err := tbl.Remote(pd, q, key, 0, 1, mr.RemoteRead); !errors.Is(err, mr.ErrInvalidKey) {
					t.Fatalf("unbound window answers: %v", err)
				}
				return
			}
			// Inside works (both ends), outside and the old key fail.
			if _, err := tbl.Remote(pd, q, key, info.Addr, info.Length, mr.RemoteRead); err != nil {
				t.Fatalf("whole window: %v", err)
			}
			if _, err := tbl.Remote(pd, q, key, info.Addr+info.Length-1, 2, mr.RemoteRead); !errors.Is(err, mr.ErrOutOfBounds) {
				t.Fatalf("one byte past the window: %v", err)
			}
			if _, err := tbl.Remote(pd, q, key, info.Addr-1, 1, mr.RemoteRead); !errors.Is(err, mr.ErrOutOfBounds) {
				t.Fatalf("one byte before the window: %v", err)
			}
			if _, err := tbl.Remote(pd, q, old, info.Addr, 1, mr.RemoteRead); !errors.Is(err, mr.ErrInvalidKey) {
				t.Fatalf("the rkey before the bind: %v", err)
			}
			if _, err := tbl.Remote(pd, q, key, info.Addr, 8, mr.RemoteAtomic); !errors.Is(err, mr.ErrAccess) {
				t.Fatalf("atomic on a window without REMOTE_ATOMIC: %v", err)
			}
			if _, err := tbl.Remote(tbl.AllocPD(), q, key, info.Addr, 1, mr.RemoteRead); !errors.Is(err, mr.ErrPDMismatch) {
				t.Fatalf("another PD: %v", err)
			}
			_, err = tbl.Remote(pd, &fakeQP{0x12}, key, info.Addr, 1, mr.RemoteRead)
			if tc.typ == mr.MWType2B && !errors.Is(err, mr.ErrInvalidKey) {
				t.Fatalf("type 2B window through another QP: %v", err)
			} else if tc.typ == mr.MWType1 && err != nil {
				t.Fatalf("type 1 window through another QP of the PD: %v", err)
			}
			// The region cannot go while the window holds it.
			if err := info.MR.Deregister(); !errors.Is(err, mr.ErrBound) {
				t.Fatalf("deregister with a window bound: %v", err)
			}
		})
	}
}

func TestMWInvalidate(t *testing.T) {
	rw := mr.RemoteRead | mr.RemoteWrite
	tbl, pd, m, q := mwFixture(t)
	w2, _ := pd.AllocMW(mr.MWType2B)
	w1, _ := pd.AllocMW(mr.MWType1)
	k2, k1 := mr.IncRKey(w2.RKey()), mr.IncRKey(w1.RKey())
	must(t, tbl.BindMW(w2, q, pd, k2, mr.BindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: rw}))
	must(t, tbl.BindMW(w1, q, pd, k1, mr.BindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: rw}))

	// A peer's SEND with Invalidate on another queue pair, with a stale key,
	// from another PD: refused, the window stays.
	if err := tbl.InvalidateRKey(pd, &fakeQP{0x99}, k2); !errors.Is(err, mr.ErrAccess) {
		t.Fatalf("invalidate through another QP: %v", err)
	}
	if err := tbl.InvalidateRKey(pd, q, w2.RKey()-1); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("invalidate with the old key: %v", err)
	}
	if err := tbl.InvalidateRKey(tbl.AllocPD(), q, k2); !errors.Is(err, mr.ErrPDMismatch) {
		t.Fatalf("invalidate from another PD: %v", err)
	}
	// Type 1 windows are never invalidated.
	if err := tbl.InvalidateRKey(pd, nil, k1); !errors.Is(err, mr.ErrAccess) {
		t.Fatalf("invalidate a type 1 window: %v", err)
	}
	// A RemoteInvalidate region with a window bound keeps its key.
	fr, _ := pd.RegisterIOVA(make([]byte, 64), 0x80000, mr.LocalWrite|mr.MWBind|mr.RemoteInvalidate)
	w3, _ := pd.AllocMW(mr.MWType1)
	must(t, tbl.BindMW(w3, q, pd, mr.IncRKey(w3.RKey()), mr.BindInfo{MR: fr, Addr: fr.Addr(), Length: 8, Access: mr.RemoteRead}))
	if err := tbl.InvalidateRKey(pd, nil, fr.RKey()); !errors.Is(err, mr.ErrBound) {
		t.Fatalf("invalidate a region with a window bound: %v", err)
	}

	var c mr.Cache // a cached rkey is refused from the invalidation on
	if _, err := tbl.RemoteCached(&c, pd, q, k2, m.Addr(), 8, mr.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	must(t, tbl.InvalidateRKey(pd, q, k2))
	if _, err := tbl.RemoteCached(&c, pd, q, k2, m.Addr(), 8, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("cached rkey after the invalidation: %v", err)
	}
	if err := tbl.InvalidateRKey(pd, q, k2); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("second invalidation: %v", err)
	}
	// Free again: it binds again, with a new key; the region may go once
	// no window holds it.
	k2b := mr.IncRKey(k2)
	must(t, tbl.BindMW(w2, q, pd, k2b, mr.BindInfo{MR: m, Addr: m.Addr() + 8, Length: 8, Access: mr.RemoteRead}))
	if _, err := tbl.Remote(pd, q, k2b, m.Addr()+8, 8, mr.RemoteRead); err != nil {
		t.Fatal(err)
	}
	must(t, w2.Dealloc())
	must(t, tbl.BindMW(w1, q, pd, mr.IncRKey(k1), mr.BindInfo{})) // unbind
	if _, err := tbl.Remote(pd, q, k2b, m.Addr()+8, 8, mr.RemoteRead); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("deallocated window: %v", err)
	}
	must(t, m.Deregister())
	if err := w2.Dealloc(); !errors.Is(err, mr.ErrDeallocated) {
		t.Fatalf("second dealloc: %v", err)
	}
	// The PD is held by the windows left.
	if err := pd.Dealloc(); !errors.Is(err, mr.ErrBusy) {
		t.Fatalf("dealloc PD with windows: %v", err)
	}
}

// TestMWZeroBased: a zero-based type 2B window is addressed from 0.
func TestMWZeroBased(t *testing.T) {
	tbl, pd, m, q := mwFixture(t)
	copy(m.Bytes()[100:], "window")
	w, _ := pd.AllocMW(mr.MWType2B)
	k := mr.IncRKey(w.RKey())
	must(t, tbl.BindMW(w, q, pd, k, mr.BindInfo{MR: m, Addr: m.Addr() + 100, Length: 6, Access: mr.RemoteRead | mr.ZeroBased}))
	if b, err := tbl.Remote(pd, q, k, 0, 6, mr.RemoteRead); err != nil || string(b) != "window" {
		t.Fatalf("zero-based read: %q %v", b, err)
	}
	if _, err := tbl.Remote(pd, q, k, m.Addr()+100, 1, mr.RemoteRead); !errors.Is(err, mr.ErrOutOfBounds) {
		t.Fatalf("zero-based window addressed by the region's IOVA: %v", err)
	}
}

// FuzzMWStaleRKeys drives windows and regions through binds, invalidations,
// deallocations and registrations from the fuzzer's bytes and probes rkeys
// (live, stale, made up) against a model: a key answers only while it is
// the live key of a bound window or a registered region, and only inside it.
func FuzzMWStaleRKeys(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{1, 1, 3, 9, 9, 2, 0, 5, 5, 6, 7, 3, 3, 3, 250, 251})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops = ops[:min(len(ops), 300)] // the probes grow with the history: keep a run short
		tbl := mr.NewTable(mr.WithRand(newSeeded(3)), mr.WithRetiredKeys(4))
		pd := tbl.AllocPD()
		q := &fakeQP{0x11}
		base, err := pd.RegisterIOVA(make([]byte, 1024), 0x10000, mr.LocalWrite|mr.MWBind)
		if err != nil {
			t.Fatal(err)
		}
		type win struct {
			w     *mr.MW
			key   uint32 // the live key while bound
			lo, n uint64
			bound bool
		}
		var wins []*win
		var regions []*mr.MR
		var stale []uint32
		live := func(k uint32) (lo, n uint64, ok bool) {
			for _, w := range wins {
				if w.bound && w.key == k {
					return w.lo, w.n, true
				}
			}
			for _, m := range regions {
				if m.RKey() == k {
					return m.Addr(), uint64(m.Len()), true
				}
			}
			return 0, 0, false
		}
		for i, op := range ops {
			arg := uint64(op) * 7 % 1000
			switch op % 6 {
			case 0:
				if w, err := pd.AllocMW(mr.MWType1 + mr.MWType(op/6%2)); err == nil {
					wins = append(wins, &win{w: w})
				}
			case 1, 2:
				if len(wins) == 0 {
					break
				}
				w := wins[int(arg)%len(wins)]
				old := w.w.RKey()
				k := mr.IncRKey(old)
				n := arg%17 + 1
				if err := tbl.BindMW(w.w, q, pd, k, mr.BindInfo{MR: base, Addr: base.Addr() + arg, Length: n, Access: mr.RemoteRead}); err == nil {
					if w.bound {
						stale = append(stale, w.key)
					}
					w.key, w.lo, w.n, w.bound = k, base.Addr()+arg, n, true
				}
			case 3:
				if len(wins) == 0 {
					break
				}
				w := wins[int(arg)%len(wins)]
				if err := tbl.InvalidateRKey(pd, q, w.key); err == nil {
					if !w.bound || w.w.Type() != mr.MWType2B {
						t.Fatalf("op %d: invalidated %#x (bound %v, %v)", i, w.key, w.bound, w.w.Type())
					}
					w.bound = false
					stale = append(stale, w.key)
				}
			case 4:
				if len(wins) == 0 {
					break
				}
				j := int(arg) % len(wins)
				must(t, wins[j].w.Dealloc())
				if wins[j].bound {
					stale = append(stale, wins[j].key)
				}
				wins = append(wins[:j], wins[j+1:]...)
			case 5:
				if op&0x80 != 0 && len(regions) > 0 {
					stale = append(stale, regions[0].RKey())
					must(t, regions[0].Deregister())
					regions = regions[1:]
				} else if m, err := pd.Register(make([]byte, 32), mr.LocalWrite|mr.RemoteRead); err == nil {
					regions = append(regions, m)
				}
			}
			// Probe: every live key inside and just outside, every stale
			// key, and a made-up one.
			var made [4]byte
			binary.LittleEndian.PutUint32(made[:], uint32(i)*0x9E3779B9)
			stale = stale[max(0, len(stale)-64):]
			probes := append(append([]uint32{}, stale...), binary.LittleEndian.Uint32(made[:]))
			for _, w := range wins {
				probes = append(probes, w.w.RKey())
			}
			for _, m := range regions {
				probes = append(probes, m.RKey())
			}
			for _, k := range probes {
				lo, n, ok := live(k)
				if !ok {
					if _, err := tbl.Remote(pd, q, k, 0x10000, 1, mr.RemoteRead); err == nil {
						t.Fatalf("op %d: rkey %#x (not live) answers", i, k)
					}
					continue
				}
				if _, err := tbl.Remote(pd, q, k, lo, n, mr.RemoteRead); err != nil {
					t.Fatalf("op %d: live rkey %#x: %v", i, k, err)
				}
				if _, err := tbl.Remote(pd, q, k, lo+n, 1, mr.RemoteRead); err == nil {
					t.Fatalf("op %d: rkey %#x answers past its end", i, k)
				}
			}
		}
	})
}
