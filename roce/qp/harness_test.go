package qp

import (
	"cmp"
	"flag"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

var long = flag.Bool("long", false, "run the long variants")

const frameSize = 4096 + 128

// txOut is an Output over preallocated buffers.
type txOut struct {
	pool      [][]byte
	free      int
	committed [][]byte
	limit     int // buffers per Progress call; 0: unlimited up to the pool
}

func newTxOut(n int) *txOut {
	o := &txOut{pool: make([][]byte, n), committed: make([][]byte, 0, n)}
	for i := range o.pool {
		o.pool[i] = make([]byte, frameSize)
	}
	o.free = n
	return o
}

func (o *txOut) TxBuffer() []byte {
	if o.free == 0 || (o.limit > 0 && len(o.committed) >= o.limit) {
		return nil
	}
	o.free--
	return o.pool[o.free]
}

func (o *txOut) TxCommit(f []byte) { o.committed = append(o.committed, f) }

// faults configures the in-test network; probabilities per frame.
type faults struct {
	loss, reorder, dup, corrupt float64
	seed                        uint64
	// drop, when set, decides per decoded packet (after the random faults)
	// whether to drop it.
	drop func(from *end, p *wire.Packet) bool
}

// end is one side: its own table, PD, CQ and QP (two devices).
type end struct {
	name  string
	tbl   *mr.Table
	pd    *mr.PD
	cq    *CQ
	q     *QP
	out   *txOut
	inbox [][]byte // frames in flight to this end (copies)
	slab  [][]byte // recycled frame copies
	pkt   wire.Packet
	mac   [6]byte
	ip    netip.Addr
	sent  int // frames sent
}

type pair struct {
	tb   testing.TB
	a, b *end
	now  int64
	f    faults
	rng  *rand.Rand
	// tap, when set, sees every frame put on the wire.
	tap func(from *end, frame []byte)
}

type pairOpts struct {
	typ        Type
	mtu        wire.MTU
	access     mr.Access
	timeout    uint8
	retry      uint8
	rnrRetry   uint8
	minRNR     uint8
	rdAtomic   uint8
	destRdAtom uint8 // max_dest_rd_atomic; 0: 16
	maxWR      int
	window     int
	cqDepth    int
	noConnect  bool
	f          faults
	maxInline  int
	txBufs     int    // transmit buffers of each end (0: 512)
	sr         bool   // selective repeat (Attr.SelectiveRepeat) on both ends
	srWindow   uint32 // Attr.SRWindow on both ends (0: the first format's 256)
	dcqcn      bool   // DCQCN (Attr.DCQCN, frames ECT(0)) on both ends
	sendWindow uint32 // Attr.SendWindow at RTS on both ends (0: not set)
	ccParams   DCQCNParams
}

func (o pairOpts) maxDestRdAtomic() uint8 {
	if o.destRdAtom == 0 {
		return 16
	}
	return o.destRdAtom
}

func defaultOpts() pairOpts {
	return pairOpts{typ: RC, mtu: wire.MTU1024, access: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic,
		timeout: 10, retry: 7, rnrRetry: 7, minRNR: 1, rdAtomic: 16, maxWR: 256, cqDepth: 4096}
}

func newEnd(tb testing.TB, name string, qpn uint32, o pairOpts, last byte) *end {
	tb.Helper()
	var tblOpts []mr.Option
	var pool *ContextPool
	if o.typ == OOO || o.sr { // deterministic keys: the OOO and SR golden captures
		tblOpts = append(tblOpts, mr.WithRand(&keySource{next: uint32(last) << 8}))
	}
	if o.typ == OOO { // and contexts
		var err error
		if pool, err = NewContextPool(64, uint64(last)); err != nil {
			tb.Fatal(err)
		}
	}
	e := &end{name: name, tbl: mr.NewTable(tblOpts...), out: newTxOut(cmp.Or(o.txBufs, 512)),
		mac: [6]byte{0x02, 0, 0, 0, 0, last}, ip: netip.AddrFrom4([4]byte{198, 51, 100, last})}
	e.pd = e.tbl.AllocPD()
	e.cq = NewCQ(o.cqDepth)
	q, err := New(Config{Type: o.typ, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: o.maxWR,
		MaxRecvWR: o.maxWR, MaxSGE: 4, QPN: qpn, SendWindow: o.window, MaxInline: o.maxInline, Contexts: pool,
		DCQCN: o.ccParams})
	if err != nil {
		tb.Fatal(err)
	}
	e.q = q
	e.slab = make([][]byte, 0, 1024)
	return e
}

func newPair(tb testing.TB, o pairOpts) *pair {
	tb.Helper()
	p := &pair{tb: tb, a: newEnd(tb, "A", 0x11, o, 1), b: newEnd(tb, "B", 0x12, o, 2), f: o.f,
		now: 1_000_000}
	p.rng = rand.New(rand.NewPCG(o.f.seed, 0x9e3779b97f4a7c15))
	if !o.noConnect {
		p.connect(o)
	}
	return p
}

func (p *pair) connect(o pairOpts) {
	p.tb.Helper()
	connect(p.tb, p.a, p.b, o, 0x1000, 0x2000)
	connect(p.tb, p.b, p.a, o, 0x2000, 0x1000)
}

func avOf(from, to *end) AddressVector {
	return AddressVector{SrcMAC: from.mac, DstMAC: to.mac, SrcIP: from.ip, DstIP: to.ip}
}

// connect brings e to RTS towards peer: e sends from sqPSN, expects rqPSN.
func connect(tb testing.TB, e, peer *end, o pairOpts, sqPSN, rqPSN uint32) {
	tb.Helper()
	q := e.q
	if o.typ == UD {
		must(tb, q.Modify(&Attr{State: Init, QKey: 0x11111111, PathMTU: o.mtu}, AttrState|AttrQKey|AttrPathMTU))
		must(tb, q.Modify(&Attr{State: RTR}, AttrState))
		must(tb, q.Modify(&Attr{State: RTS, SQPSN: sqPSN}, AttrState|AttrSQPSN))
		return
	}
	must(tb, q.Modify(&Attr{State: Init, Access: o.access}, AttrState|AttrAccessFlags))
	if o.typ == UC {
		must(tb, q.Modify(&Attr{State: RTR, AV: avOf(e, peer), PathMTU: o.mtu, DestQPN: peer.q.QPN(), RQPSN: rqPSN},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN))
		must(tb, q.Modify(&Attr{State: RTS, SQPSN: sqPSN}, AttrState|AttrSQPSN))
		return
	}
	rtr := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	if o.sr {
		rtr |= AttrSelectiveRepeat
	}
	av := avOf(e, peer)
	if o.dcqcn {
		rtr |= AttrDCQCN
		av.TOS = ecnECT0
	}
	must(tb, q.Modify(&Attr{State: RTR, AV: av, PathMTU: o.mtu, DestQPN: peer.q.QPN(), RQPSN: rqPSN,
		MaxDestRdAtomic: o.maxDestRdAtomic(), MinRNRTimer: o.minRNR, SelectiveRepeat: o.sr, SRWindow: o.srWindow, DCQCN: o.dcqcn}, rtr))
	rts := AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic
	if o.sendWindow != 0 {
		rts |= AttrSendWindow
	}
	must(tb, q.Modify(&Attr{State: RTS, SQPSN: sqPSN, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry,
		MaxRdAtomic: o.rdAtomic, SendWindow: o.sendWindow}, rts))
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func (p *pair) peer(e *end) *end {
	if e == p.a {
		return p.b
	}
	return p.a
}

// transmit runs e's Progress and moves its frames into the peer's inbox
// through the faults. It returns the next deadline.
func (p *pair) transmit(e *end) int64 {
	dl := e.q.Progress(p.now, e.out)
	to := p.peer(e)
	for _, f := range e.out.committed {
		e.sent++
		if p.tap != nil {
			p.tap(e, f)
		}
		p.put(to, f)
	}
	clear(e.out.committed)
	e.out.committed = e.out.committed[:0]
	e.out.free = len(e.out.pool)
	return dl
}

func (p *pair) put(to *end, f []byte) {
	r := p.rng
	if p.f.loss > 0 && r.Float64() < p.f.loss {
		return
	}
	copies := 1
	if p.f.dup > 0 && r.Float64() < p.f.dup {
		copies = 2
	}
	for range copies {
		var c []byte
		if n := len(to.slab); n > 0 {
			c = to.slab[n-1][:0]
			to.slab = to.slab[:n-1]
		} else {
			c = make([]byte, 0, frameSize)
		}
		c = append(c, f...)
		if p.f.corrupt > 0 && r.Float64() < p.f.corrupt {
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
		}
		to.inbox = append(to.inbox, c)
		if p.f.reorder > 0 && len(to.inbox) > 1 && r.Float64() < p.f.reorder {
			i := len(to.inbox) - 1
			j := r.IntN(i)
			to.inbox[i], to.inbox[j] = to.inbox[j], to.inbox[i]
		}
	}
}

// deliver hands e's inbox to its QP.
func (p *pair) deliver(e *end) int {
	n := len(e.inbox)
	from := p.peer(e)
	flags := wire.AcceptSR // an RC QP without selective repeat drops SR_SACK itself
	if e.q.Type() == OOO {
		flags = wire.AcceptOOO
	}
	for i, f := range e.inbox {
		if err := e.pkt.DecodeWith(f, flags); err == nil {
			if e.pkt.BTH.DestQPN == e.q.QPN() && (p.f.drop == nil || !p.f.drop(from, &e.pkt)) {
				e.q.Receive(&e.pkt, p.now, e.out)
			}
		}
		e.slab = append(e.slab, f)
		e.inbox[i] = nil
	}
	e.inbox = e.inbox[:0]
	return n
}

// step runs one round: both ends transmit, both deliver. It returns how many
// frames moved and the earliest deadline.
func (p *pair) step() (int, int64) {
	da := p.transmit(p.a)
	db := p.transmit(p.b)
	n := p.deliver(p.a) + p.deliver(p.b)
	d := da
	if db != 0 && (d == 0 || db < d) {
		d = db
	}
	return n, d
}

// run steps until done() or nothing is left to do (no frames, no timers), or
// maxSteps pass. Idle rounds jump the clock to the next deadline.
func (p *pair) run(done func() bool, maxSteps int) bool {
	for range maxSteps {
		if done != nil && done() {
			return true
		}
		n, d := p.step()
		if n == 0 {
			if d == 0 {
				n2, d2 := p.step()
				if n2 == 0 && d2 == 0 {
					return done == nil || done()
				}
				continue
			}
			if d > p.now {
				p.now = d
			}
		}
	}
	return done != nil && done()
}

// poll collects n completions from e (running the pair meanwhile).
func (p *pair) poll(e *end, n int) []WC {
	p.tb.Helper()
	var got []WC
	buf := make([]WC, 64)
	p.run(func() bool {
		k, err := e.cq.Poll(buf)
		if err != nil {
			p.tb.Fatalf("poll %s: %v", e.name, err)
		}
		got = append(got, buf[:k]...)
		return len(got) >= n
	}, 1_000_000)
	if len(got) < n {
		p.tb.Fatalf("%s: %d completions, want %d: %+v\n%s\n%s\nnow %d", e.name, len(got), n, got, p.a.q.dump(), p.b.q.dump(), p.now)
	}
	return got
}

func (e *end) reg(tb testing.TB, size int, acc mr.Access) (*mr.MR, []byte) {
	tb.Helper()
	b := make([]byte, size)
	m, err := e.pd.Register(b, acc)
	if err != nil {
		tb.Fatal(err)
	}
	return m, b
}

func sge(m *mr.MR, off, n int) mr.SGE {
	return mr.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

const allAcc = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
