package enlarge

import (
	"errors"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The fake behaves like RC RDMA between two ends: each end has a goroutine
// (its "engine") that executes posted work requests in order, writes remote
// memory, consumes the peer's receives and produces completions. Keys are
// checked on every access, so a deregistered region's keys are refused.
// Hooks can damage, drop or delay the tail of an RDMA WRITE.

type fakeNet struct {
	mu       sync.Mutex
	regs     map[uint32]*fakeRegion // by rkey and by lkey
	rng      *rand.Rand
	nextAddr uint64
	all      []*fakeRegion
}

func newFakeNet(seed int64) *fakeNet {
	return &fakeNet{regs: map[uint32]*fakeRegion{}, rng: rand.New(rand.NewSource(seed)), nextAddr: 0x10000}
}

type fakeRegion struct {
	mu         sync.RWMutex
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	dead       atomic.Bool
}

func (r *fakeRegion) Bytes() []byte { return r.buf }
func (r *fakeRegion) Addr() uint64  { return r.addr }
func (r *fakeRegion) LKey() uint32  { return r.lkey }
func (r *fakeRegion) RKey() uint32  { return r.rkey }

func (n *fakeNet) key() uint32 {
	for {
		k := n.rng.Uint32()
		if _, used := n.regs[k]; k != 0 && !used {
			return k
		}
	}
}

func (n *fakeNet) lookup(key uint32) *fakeRegion {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.regs[key]
}

// fakeAction is what a hook does to one RDMA WRITE.
type fakeAction struct {
	Drop      bool          // nothing lands
	TailFrom  int           // > 0: bytes from here on are dropped or delayed
	TailDrop  bool          // the tail never lands
	TailDelay time.Duration // the tail lands this much later
}

type fakeRecv struct {
	id  uint64
	r   *fakeRegion
	off int
	n   int
}

type fakeEnd struct {
	net  *fakeNet
	peer *fakeEnd
	sq   chan WorkRequest
	quit chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex // rq, cq
	rq     []fakeRecv
	rqHead int
	cq     []Completion

	hook       atomic.Pointer[func(wr *WorkRequest, data []byte) fakeAction]
	pending    sync.WaitGroup // delayed tails
	regBytes   atomic.Int64
	posted     [3]atomic.Int64 // work requests executed, by Op
	scratch    []byte
	cur        WorkRequest
	rnr        atomic.Int64 // receiver-not-ready waits
	dataWrites atomic.Int64
	kinds      [5]atomic.Int64 // WRITE_WITH_IMMs by kind: data, more, req, ack, credit
}

func newFakePair(seed int64) (a, b *fakeEnd) {
	n := newFakeNet(seed)
	a = &fakeEnd{net: n, sq: make(chan WorkRequest, 8192), quit: make(chan struct{})}
	b = &fakeEnd{net: n, sq: make(chan WorkRequest, 8192), quit: make(chan struct{})}
	a.peer, b.peer = b, a
	for _, e := range []*fakeEnd{a, b} {
		e.wg.Add(1)
		go e.engine()
	}
	return a, b
}

func (e *fakeEnd) close() {
	close(e.quit)
	e.wg.Wait()
	e.pending.Wait()
}

func (e *fakeEnd) setHook(h func(wr *WorkRequest, data []byte) fakeAction) {
	if h == nil {
		e.hook.Store(nil)
		return
	}
	e.hook.Store(&h)
}

func (e *fakeEnd) Register(n int) (Region, error) {
	if n <= 0 {
		return nil, errors.New("fake: register: empty")
	}
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	r := &fakeRegion{buf: make([]byte, n), addr: e.net.nextAddr}
	e.net.nextAddr += (uint64(n) + 0xFFF) &^ 0xFFF
	r.lkey = e.net.key()
	e.net.regs[r.lkey] = r
	r.rkey = e.net.key()
	e.net.regs[r.rkey] = r
	e.net.all = append(e.net.all, r)
	e.regBytes.Add(int64(n))
	return r, nil
}

func (e *fakeEnd) Deregister(reg Region) error {
	r := reg.(*fakeRegion)
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if r.dead.Load() {
		return errors.New("fake: deregister: not registered")
	}
	r.dead.Store(true)
	delete(e.net.regs, r.lkey)
	delete(e.net.regs, r.rkey)
	e.regBytes.Add(-int64(len(r.buf)))
	return nil
}

func (e *fakeEnd) PostSend(wr *WorkRequest) error {
	select {
	case e.sq <- *wr:
		return nil
	default:
		return errors.New("fake: send queue full")
	}
}

func (e *fakeEnd) PostRecv(id uint64, reg Region, off, n int) error {
	var r *fakeRegion
	if reg != nil {
		r = reg.(*fakeRegion)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rqHead > 0 && (e.rqHead == len(e.rq) || len(e.rq) == cap(e.rq)) {
		n := copy(e.rq, e.rq[e.rqHead:])
		e.rq, e.rqHead = e.rq[:n], 0
	}
	e.rq = append(e.rq, fakeRecv{id: id, r: r, off: off, n: n})
	return nil
}

func (e *fakeEnd) Poll(c []Completion) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := copy(c, e.cq)
	m := copy(e.cq, e.cq[n:])
	e.cq = e.cq[:m]
	return n, nil
}

func (e *fakeEnd) Load(reg Region, off int, dst []byte) {
	r := reg.(*fakeRegion)
	r.mu.RLock()
	copy(dst, r.buf[off:])
	r.mu.RUnlock()
}

func (e *fakeEnd) complete(c Completion) {
	e.mu.Lock()
	e.cq = append(e.cq, c)
	e.mu.Unlock()
}

// takeRecv pops the next posted receive of e.
func (e *fakeEnd) takeRecv() (fakeRecv, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rqHead == len(e.rq) {
		return fakeRecv{}, false
	}
	r := e.rq[e.rqHead]
	e.rqHead++
	return r, true
}

func (e *fakeEnd) engine() {
	defer e.wg.Done()
	for {
		select {
		case <-e.quit:
			return
		case e.cur = <-e.sq:
			e.execute(&e.cur)
		}
	}
}

func (e *fakeEnd) execute(wr *WorkRequest) {
	e.posted[wr.Op].Add(1)
	fail := func(status string) { e.complete(Completion{ID: wr.ID, Kind: CompSend, Status: status}) }
	local, ok := wr.Local.(*fakeRegion)
	if !ok || e.net.lookup(local.lkey) != local || wr.Offset < 0 || wr.Offset+wr.Length > len(local.buf) {
		fail("IBV_WC_LOC_PROT_ERR")
		return
	}
	src := local.buf[wr.Offset : wr.Offset+wr.Length]
	peer := e.peer
	if wr.Op == OpWriteImm {
		e.dataWrites.Add(1)
		if k := wr.Imm >> immKindShift; k <= immCredit {
			e.kinds[k].Add(1)
		}
	}
	switch wr.Op {
	case OpWrite, OpWriteImm:
		dst := e.net.lookup(wr.RKey)
		if dst == nil || dst.rkey != wr.RKey || wr.RemoteAddr < dst.addr ||
			wr.RemoteAddr+uint64(len(src)) > dst.addr+uint64(len(dst.buf)) {
			fail("IBV_WC_REM_ACCESS_ERR")
			return
		}
		off := int(wr.RemoteAddr - dst.addr)
		var act fakeAction
		if h := e.hook.Load(); h != nil {
			if cap(e.scratch) < len(src) {
				e.scratch = make([]byte, len(src))
			}
			data := e.scratch[:len(src)]
			copy(data, src)
			act = (*h)(wr, data)
			src = data
		}
		if !act.Drop {
			head := src
			if act.TailFrom > 0 && act.TailFrom < len(src) {
				head = src[:act.TailFrom]
				if !act.TailDrop {
					tail := append([]byte(nil), src[act.TailFrom:]...)
					at := off + act.TailFrom
					e.pending.Add(1)
					time.AfterFunc(act.TailDelay, func() {
						defer e.pending.Done()
						dst.mu.Lock()
						copy(dst.buf[at:], tail)
						dst.mu.Unlock()
					})
				}
			}
			dst.mu.Lock()
			copy(dst.buf[off:], head)
			dst.mu.Unlock()
		}
		if wr.Op == OpWriteImm {
			// like RNR retry forever: wait for the peer to post a receive
			rv, ok := peer.takeRecv()
			for !ok {
				select {
				case <-e.quit:
					return
				case <-time.After(50 * time.Microsecond):
				}
				e.rnr.Add(1)
				rv, ok = peer.takeRecv()
			}
			peer.complete(Completion{ID: rv.id, Kind: CompRecvImm, Imm: wr.Imm, HasImm: true})
		}
	default:
		fail("IBV_WC_LOC_QP_OP_ERR")
		return
	}
	e.complete(Completion{ID: wr.ID, Kind: CompSend})
}

// pair is two connected channel ends over the fake.
type pair struct {
	a, b   *Channel
	fa, fb *fakeEnd
	pa, pb *Pool
}

func newPair(tb testing.TB, cfg *Config) *pair {
	tb.Helper()
	return newPairCfgs(tb, cfg, cfg)
}

// newPairCfgs is newPair with a configuration for each end.
func newPairCfgs(tb testing.TB, cfg, cfgB *Config) *pair {
	tb.Helper()
	fa, fb := newFakePair(1)
	p := &pair{fa: fa, fb: fb}
	tb.Cleanup(func() { fa.close(); fb.close() })
	slot := DefaultSmall
	if cfg != nil && cfg.Mode == Baseline {
		slot = BaselineSlotSize
	}
	var err error
	if p.pa, err = NewPool(fa, 64, slot); err != nil {
		tb.Fatal(err)
	}
	if p.pb, err = NewPool(fb, 64, slot); err != nil {
		tb.Fatal(err)
	}
	if p.a, err = New(fa, p.pa, cfg); err != nil {
		tb.Fatal(err)
	}
	if p.b, err = New(fb, p.pb, cfgB); err != nil {
		tb.Fatal(err)
	}
	if err := p.a.Connect(p.b.Endpoint()); err != nil {
		tb.Fatal(err)
	}
	if err := p.b.Connect(p.a.Endpoint()); err != nil {
		tb.Fatal(err)
	}
	return p
}
