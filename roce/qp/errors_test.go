package qp

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestRemoteErrors: requests the responder must refuse; the requester gets
// the right NAK and WC, the victim's memory is unchanged, both QPs end in
// Error and later WRs are flushed.
func TestRemoteErrors(t *testing.T) {
	type setup struct {
		victimAccess mr.Access // of the victim MR
		qpAccess     mr.Access // of the victim QP
	}
	tests := []struct {
		name    string
		s       setup
		op      WROpcode
		rkey    func(m *mr.MR) uint32
		addr    func(m *mr.MR) uint64
		n       int
		nak     uint8
		status  WCStatus
		recvErr bool
	}{
		{name: "bad rkey write", s: setup{allAcc, allAcc}, op: WRRDMAWrite, rkey: func(m *mr.MR) uint32 { return m.RKey() ^ 0x5a5a }, n: 100, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "bad rkey read", s: setup{allAcc, allAcc}, op: WRRDMARead, rkey: func(m *mr.MR) uint32 { return m.RKey() + 1 }, n: 100, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "out of bounds write", s: setup{allAcc, allAcc}, op: WRRDMAWrite, addr: func(m *mr.MR) uint64 { return m.Addr() + 4000 }, n: 200, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "below start read", s: setup{allAcc, allAcc}, op: WRRDMARead, addr: func(m *mr.MR) uint64 { return m.Addr() - 8 }, n: 16, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "mr without remote write", s: setup{mr.LocalWrite | mr.RemoteRead, allAcc}, op: WRRDMAWrite, n: 100, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "mr without remote read", s: setup{mr.LocalWrite | mr.RemoteWrite, allAcc}, op: WRRDMARead, n: 100, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "mr without atomic", s: setup{mr.LocalWrite | mr.RemoteWrite, allAcc}, op: WRAtomicFetchAdd, n: 8, nak: wire.NAKRemoteAccess, status: WCRemAccessErr},
		{name: "qp without remote read", s: setup{allAcc, mr.RemoteWrite}, op: WRRDMARead, n: 100, nak: wire.NAKInvalidRequest, status: WCRemInvReqErr},
		{name: "qp without remote write", s: setup{allAcc, mr.RemoteRead}, op: WRRDMAWrite, n: 100, nak: wire.NAKInvalidRequest, status: WCRemInvReqErr},
		{name: "qp without atomic", s: setup{allAcc, mr.RemoteRead}, op: WRAtomicCmpSwp, n: 8, nak: wire.NAKInvalidRequest, status: WCRemInvReqErr},
		{name: "receive buffer too small", s: setup{allAcc, allAcc}, op: WRSend, n: 3000, nak: wire.NAKInvalidRequest, status: WCRemInvReqErr, recvErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOpts()
			p := newPair(t, o)
			// The victim QP's access flags.
			must(t, p.b.q.Modify(&Attr{Access: tc.s.qpAccess}, AttrAccessFlags))
			am, abuf := p.a.reg(t, 4096, allAcc)
			vb := make([]byte, 4096)
			fill(vb, 0xEE)
			victim, err := p.b.pd.Register(vb, tc.s.victimAccess)
			must(t, err)
			before := bytes.Clone(vb)
			fill(abuf, 1)
			clear(abuf[2048:])
			var naks []wire.AETH
			p.tap = func(from *end, f []byte) {
				var pk wire.Packet
				if from == p.b && pk.Decode(f) == nil && pk.AETH.Type() == wire.SyndromeNAK {
					naks = append(naks, pk.AETH)
				}
			}
			rkey, addr := victim.RKey(), victim.Addr()
			if tc.rkey != nil {
				rkey = tc.rkey(victim)
			}
			if tc.addr != nil {
				addr = tc.addr(victim)
			}
			if tc.op == WRSend {
				must(t, p.b.q.PostRecv(&RecvWR{ID: 50, SGL: []mr.SGE{sge(victim, 0, 1000)}}))
			}
			sglOff := 0
			if tc.op == WRRDMARead || tc.op.isAtomic() {
				sglOff = 2048
			}
			must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: tc.op, Flags: Signaled, SGL: []mr.SGE{sge(am, sglOff, tc.n)},
				RemoteAddr: addr, RKey: rkey, CompareAdd: 1}))
			must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRRDMAWrite, SGL: []mr.SGE{sge(am, 0, 10)},
				RemoteAddr: victim.Addr(), RKey: victim.RKey()}))
			w := p.poll(p.a, 2)
			want := []WC{{ID: 1, Status: tc.status, Opcode: tc.op.wcOpcode(), QPN: 0x11},
				{ID: 2, Status: WCWRFlushErr, Opcode: WCRDMAWrite, QPN: 0x11}}
			if d := cmp.Diff(want, w); d != "" {
				t.Fatalf("WCs (-want +got):\n%s", d)
			}
			if len(naks) != 1 || naks[0].Syndrome != tc.nak {
				t.Fatalf("NAKs sent %v, want one %#x", naks, tc.nak)
			}
			if tc.recvErr {
				wb := p.poll(p.b, 1)
				if wb[0].ID != 50 || wb[0].Status != WCLocLenErr {
					t.Fatalf("receive WC %+v, want LOC_LEN_ERR", wb)
				}
				// The receive buffer held the part that fitted; the rest of the
				// victim is untouched.
				before = append(append([]byte(nil), abuf[:1000]...), before[1000:]...)
			}
			if !bytes.Equal(vb, before) {
				t.Fatal("victim memory changed")
			}
			if sglOff != 0 && !bytes.Equal(abuf[2048:2048+tc.n], make([]byte, tc.n)) {
				t.Fatal("requester's landing memory changed on an error")
			}
			if p.a.q.State() != Error || p.b.q.State() != Error {
				t.Fatalf("states %v, %v; want ERR, ERR", p.a.q.State(), p.b.q.State())
			}
		})
	}
}

func TestDeregisterDuringTraffic(t *testing.T) {
	o := defaultOpts()
	o.mtu = wire.MTU256
	p := newPair(t, o)
	am, _ := p.a.reg(t, 64<<10, allAcc)
	bm, _ := p.b.reg(t, 64<<10, allAcc)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 64<<10)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	// One round of 8 packets lands; then the region goes away.
	p.a.out.limit = 8
	p.step()
	p.a.out.limit = 0
	must(t, bm.Deregister())
	w := p.poll(p.a, 1)
	if w[0].Status != WCRemAccessErr {
		t.Fatalf("WC %+v, want REM_ACCESS_ERR", w[0])
	}
}

func TestPostErrors(t *testing.T) {
	o := defaultOpts()
	o.noConnect = true
	p := newPair(t, o)
	q := p.a.q
	am, _ := p.a.reg(t, 64, allAcc)
	send := &SendWR{ID: 1, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 8)}}
	if err := q.PostSend(send); !errors.Is(err, ErrState) {
		t.Fatalf("send in RESET: %v, want ErrState", err)
	}
	if err := q.PostRecv(&RecvWR{ID: 1}); !errors.Is(err, ErrState) {
		t.Fatalf("recv in RESET: %v, want ErrState", err)
	}
	must(t, q.Modify(&Attr{State: Init}, AttrState))
	must(t, q.PostRecv(&RecvWR{ID: 1})) // allowed from INIT
	if err := q.PostSend(send); !errors.Is(err, ErrState) {
		t.Fatalf("send in INIT: %v, want ErrState", err)
	}
	connect(t, p.a, p.b, o, 0, 0)
	for name, wr := range map[string]*SendWR{
		"no opcode":       {ID: 2},
		"too many SGEs":   {ID: 2, Opcode: WRSend, SGL: make([]mr.SGE, 5)},
		"2^31+1 bytes":    {ID: 2, Opcode: WRSend, SGL: []mr.SGE{{Length: 1 << 31}, {Length: 1}}},
		"misaligned":      {ID: 2, Opcode: WRAtomicFetchAdd, SGL: []mr.SGE{sge(am, 0, 8)}, RemoteAddr: 4},
		"atomic 4 bytes":  {ID: 2, Opcode: WRAtomicFetchAdd, SGL: []mr.SGE{sge(am, 0, 4)}},
		"inline read":     {ID: 2, Opcode: WRRDMARead, Flags: Inline, SGL: []mr.SGE{sge(am, 0, 4)}},
		"inline bad lkey": {ID: 2, Opcode: WRSend, Flags: Inline, SGL: []mr.SGE{{Addr: am.Addr(), Length: 4, LKey: am.LKey() + 1}}},
	} {
		if err := q.PostSend(wr); err == nil {
			t.Errorf("%s: post accepted", name)
		}
	}
	if err := q.PostSend(nil); err == nil {
		t.Error("nil WR accepted")
	}
	// Queue full.
	o2 := defaultOpts()
	o2.maxWR = 4
	p2 := newPair(t, o2)
	for i := range 4 {
		must(t, p2.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, SGL: []mr.SGE{sge(am, 0, 0)}}))
	}
	if err := p2.a.q.PostSend(&SendWR{ID: 5, Opcode: WRRDMAWrite}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fifth post: %v, want ErrQueueFull", err)
	}
	for i := range 4 {
		must(t, p2.b.q.PostRecv(&RecvWR{ID: uint64(i)}))
	}
	if err := p2.b.q.PostRecv(&RecvWR{ID: 5}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fifth recv: %v, want ErrQueueFull", err)
	}
	// After completion the slots free up.
	p2.run(nil, 1000)
	must(t, p2.a.q.PostSend(&SendWR{ID: 6, Opcode: WRRDMAWrite}))
	p2.run(nil, 1000)
	// Local protection error: a bad lkey in the SGL → LOC_PROT_ERR, QP error.
	must(t, p2.a.q.PostSend(&SendWR{ID: 7, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{{Addr: 1, Length: 10, LKey: 12345}}}))
	w := p2.poll(p2.a, 1)
	if w[0].ID != 7 || w[0].Status != WCLocProtErr {
		t.Fatalf("WC %+v, want LOC_PROT_ERR", w)
	}
	if p2.a.q.State() != Error {
		t.Fatalf("state %v", p2.a.q.State())
	}
}

func TestFlushOnModifyError(t *testing.T) {
	o := defaultOpts()
	p := newPair(t, o)
	am, _ := p.a.reg(t, 64, allAcc)
	p.f.drop = func(*end, *wire.Packet) bool { return true }
	for i := range 3 {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 8)}}))
		must(t, p.a.q.PostRecv(&RecvWR{ID: uint64(10 + i), SGL: []mr.SGE{sge(am, 0, 8)}}))
	}
	p.step()
	must(t, p.a.q.Modify(&Attr{State: Error}, AttrState))
	w := p.poll(p.a, 6)
	sends, recvs := 0, 0
	for _, wc := range w {
		if wc.Status != WCWRFlushErr {
			t.Fatalf("WC %+v, want WR_FLUSH_ERR", wc)
		}
		if wc.Opcode == WCRecv {
			recvs++
		} else {
			sends++
		}
	}
	if sends != 3 || recvs != 3 {
		t.Fatalf("flushed %d sends, %d receives; want 3, 3", sends, recvs)
	}
	// Reset, then back to RTS: the QP works again.
	must(t, p.a.q.Modify(&Attr{State: Reset}, AttrState))
	must(t, p.b.q.Modify(&Attr{State: Reset}, AttrState))
	p.f.drop = nil
	p.connect(o)
	bm, _ := p.b.reg(t, 64, allAcc)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(bm, 0, 64)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 8)}}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess {
		t.Fatalf("after reset: %+v", w)
	}
}

func TestModifyChecks(t *testing.T) {
	o := defaultOpts()
	o.noConnect = true
	p := newPair(t, o)
	q := p.a.q
	av := avOf(p.a, p.b)
	rtr := Attr{State: RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: 0x12, MaxDestRdAtomic: 1}
	rtrMask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	bad := []struct {
		name string
		a    Attr
		m    AttrMask
	}{
		{"reset to rtr", rtr, rtrMask},
		{"reset to rts", Attr{State: RTS}, AttrState},
		{"invalid state", Attr{State: 0}, AttrState},
		{"unknown mask", Attr{State: Init}, AttrState | 1<<20},
		{"init with sq_psn", Attr{State: Init}, AttrState | AttrSQPSN},
	}
	for _, b := range bad {
		if err := q.Modify(&b.a, b.m); err == nil {
			t.Errorf("%s: accepted", b.name)
		}
	}
	if q.State() != Reset {
		t.Fatalf("state %v after refused modifies", q.State())
	}
	must(t, q.Modify(&Attr{State: Init}, AttrState))
	badRTR := []struct {
		name string
		f    func(a *Attr)
		m    AttrMask
	}{
		{"missing dest qpn", func(a *Attr) {}, rtrMask &^ AttrDestQPN},
		{"missing av", func(a *Attr) {}, rtrMask &^ AttrAV},
		{"mtu 0", func(a *Attr) { a.PathMTU = 0 }, rtrMask},
		{"mtu 6", func(a *Attr) { a.PathMTU = 6 }, rtrMask},
		{"qpn 2^24", func(a *Attr) { a.DestQPN = 1 << 24 }, rtrMask},
		{"psn 2^24", func(a *Attr) { a.RQPSN = 1 << 24 }, rtrMask},
		{"rnr timer 32", func(a *Attr) { a.MinRNRTimer = 32 }, rtrMask},
		{"dest rd atomic 17", func(a *Attr) { a.MaxDestRdAtomic = 17 }, rtrMask},
		{"no IPs", func(a *Attr) { a.AV.SrcIP = netipZero }, rtrMask},
		{"mixed families", func(a *Attr) { a.AV.DstIP = v6 }, rtrMask},
		{"timeout at rtr", func(a *Attr) {}, rtrMask | AttrTimeout},
	}
	for _, b := range badRTR {
		a := rtr
		b.f(&a)
		if err := q.Modify(&a, b.m); err == nil {
			t.Errorf("%s: accepted", b.name)
		}
	}
	must(t, q.Modify(&rtr, rtrMask))
	rts := Attr{State: RTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	rtsMask := AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic
	for name, f := range map[string]func(a *Attr){
		"timeout 32": func(a *Attr) { a.Timeout = 32 },
		"retry 8":    func(a *Attr) { a.RetryCnt = 8 },
		"rnr 8":      func(a *Attr) { a.RNRRetry = 8 },
		"rd 17":      func(a *Attr) { a.MaxRdAtomic = 17 },
	} {
		a := rts
		f(&a)
		if err := q.Modify(&a, rtsMask); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := q.Modify(&rts, rtsMask&^AttrRetryCnt); err == nil {
		t.Error("RTS without retry_cnt accepted")
	}
	must(t, q.Modify(&rts, rtsMask))
	if err := q.Modify(&Attr{State: Init}, AttrState); !errors.Is(err, ErrState) {
		t.Errorf("RTS to INIT: %v, want ErrState", err)
	}
	must(t, q.Modify(&Attr{Timeout: 3}, AttrTimeout)) // RTS→RTS
	if s, a := q.Query(); s != RTS || a.State != RTS || a.Timeout != 3 || a.DestQPN != 0x12 {
		t.Errorf("Query after RTS→RTS: timeout %d, dest QPN %#x", a.Timeout, a.DestQPN)
	}
	must(t, q.Modify(&Attr{State: Error}, AttrState))
	must(t, q.Modify(&Attr{State: Reset}, AttrState))
	must(t, q.Destroy())
	if err := q.Modify(&Attr{State: Init}, AttrState); !errors.Is(err, ErrDestroyed) {
		t.Errorf("modify after destroy: %v", err)
	}
	if err := p.a.pd.Dealloc(); err != nil {
		t.Errorf("dealloc after the QP was destroyed: %v", err)
	}
}

func TestNewChecks(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	cq := NewCQ(4)
	good := Config{Type: RC, PD: pd, SendCQ: cq, RecvCQ: cq, QPN: 0x20}
	for name, f := range map[string]func(c *Config){
		"no type":      func(c *Config) { c.Type = 0 },
		"no pd":        func(c *Config) { c.PD = nil },
		"no cq":        func(c *Config) { c.SendCQ = nil },
		"qpn 0":        func(c *Config) { c.QPN = 0 },
		"qpn 1":        func(c *Config) { c.QPN = 1 },
		"qpn 2^24":     func(c *Config) { c.QPN = 1 << 24 },
		"sge 33":       func(c *Config) { c.MaxSGE = 33 },
		"wr 2^16":      func(c *Config) { c.MaxSendWR = 1 << 16 },
		"other table":  func(c *Config) { c.Table = mr.NewTable() },
		"inline 10000": func(c *Config) { c.MaxInline = 10000 },
	} {
		c := good
		f(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	q, err := New(good)
	must(t, err)
	if err := pd.Dealloc(); !errors.Is(err, mr.ErrBusy) {
		t.Errorf("dealloc with a QP: %v, want ErrBusy", err)
	}
	must(t, q.Destroy())
	must(t, pd.Dealloc())
}

func TestCQOverflow(t *testing.T) {
	o := defaultOpts()
	o.cqDepth = 2
	p := newPair(t, o)
	am, _ := p.a.reg(t, 64, allAcc)
	bm, _ := p.b.reg(t, 64, allAcc)
	for i := range 3 {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 8)},
			RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	}
	p.run(nil, 1000)
	wcs := make([]WC, 8)
	n, err := p.a.cq.Poll(wcs)
	if !errors.Is(err, ErrCQOverflow) || n != 2 {
		t.Fatalf("Poll = %d, %v; want 2, ErrCQOverflow", n, err)
	}
	if _, err := p.a.cq.Poll(wcs); !errors.Is(err, ErrCQOverflow) {
		t.Fatalf("overflow not sticky: %v", err)
	}
}

var (
	netipZero = netip.Addr{}
	v6        = netip.MustParseAddr("2001:db8::1")
)
