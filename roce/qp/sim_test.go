package qp

import (
	"math/rand/v2"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// simLink is one direction of a simulated wire: frames leave at rate frames
// per step, arrive delay steps later, and are lost with probability loss.
type simLink struct {
	queue   [][]byte // waiting to leave (the TX ring), at most ring
	flight  []simFrame
	ring    int
	rate    int
	delay   int
	loss    float64
	rng     *rand.Rand
	sent    int
	slab    [][]byte
	txBufs  [][]byte
	lent    int
	pending [][]byte
}

type simFrame struct {
	due   int
	frame []byte
}

// simOut is the Output of one end over a simLink.
type simOut struct{ l *simLink }

func (o simOut) TxBuffer() []byte {
	l := o.l
	if len(l.queue)+len(l.pending) >= l.ring {
		return nil
	}
	if l.lent == len(l.txBufs) {
		l.txBufs = append(l.txBufs, make([]byte, frameSize))
	}
	b := l.txBufs[l.lent]
	l.lent++
	return b
}

func (o simOut) TxCommit(f []byte) {
	l := o.l
	var c []byte
	if n := len(l.slab); n > 0 {
		c, l.slab = l.slab[n-1][:0], l.slab[:n-1]
	}
	l.pending = append(l.pending, append(c, f...))
}

// tick moves frames: the committed ones join the queue, up to rate leave,
// and those due arrive (returned).
func (l *simLink) tick(step int) [][]byte {
	l.queue = append(l.queue, l.pending...)
	l.pending = l.pending[:0]
	l.lent = 0
	for i := 0; i < l.rate && len(l.queue) > 0; i++ {
		f := l.queue[0]
		l.queue = l.queue[1:]
		l.sent++
		if l.rng.Float64() < l.loss {
			l.slab = append(l.slab, f)
			continue
		}
		l.flight = append(l.flight, simFrame{due: step + l.delay, frame: f})
	}
	var out [][]byte
	for len(l.flight) > 0 && l.flight[0].due <= step {
		out = append(out, l.flight[0].frame)
		l.flight = l.flight[1:]
	}
	return out
}

// simulate moves total bytes of RDMA WRITEs (64 KiB each, up to 8 posted)
// from a to b and returns the number of steps (1 µs each) it took and the
// frames a sent.
type simCfg struct {
	rate, delay int   // frames per step, steps one way
	stepNs      int64 // ns per step
	timeout     uint8
	window      int
	fixed       bool
}

func simulate(t *testing.T, loss float64, total int, sc simCfg) (int, int) {
	o := defaultOpts()
	o.mtu = wire.MTU1024
	o.timeout = sc.timeout
	o.window = sc.window
	p := newPair(t, o)
	if sc.fixed {
		p.a.q.fixedWin = true
	}
	const msg = 64 << 10
	am, _ := p.a.reg(t, msg, allAcc)
	bm, _ := p.b.reg(t, msg, allAcc)
	rng := rand.New(rand.NewPCG(7, uint64(sc.window)))
	ab := &simLink{ring: 256, rate: sc.rate, delay: sc.delay, loss: loss, rng: rng}
	ba := &simLink{ring: 256, rate: sc.rate, delay: sc.delay, loss: loss, rng: rng}
	posted, done := 0, 0
	wcs := make([]WC, 16)
	var pk wire.Packet
	for step := 0; step < 20_000_000; step++ {
		p.now += sc.stepNs
		for posted-done < 8 && posted*msg < total {
			must(t, p.a.q.PostSend(&SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: Signaled,
				SGL: []mr.SGE{sge(am, 0, msg)}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
			posted++
		}
		p.a.q.Progress(p.now, simOut{ab})
		p.b.q.Progress(p.now, simOut{ba})
		for _, f := range ab.tick(step) {
			if pk.Decode(f) == nil {
				p.b.q.Receive(&pk, p.now, simOut{ba})
			}
			ab.slab = append(ab.slab, f)
		}
		for _, f := range ba.tick(step) {
			if pk.Decode(f) == nil {
				p.a.q.Receive(&pk, p.now, simOut{ab})
			}
			ba.slab = append(ba.slab, f)
		}
		n, _ := p.a.cq.Poll(wcs)
		for _, w := range wcs[:n] {
			if w.Status != WCSuccess {
				t.Fatalf("WC %+v", w)
			}
		}
		done += n
		if done*msg >= total {
			t.Logf("  loss %.2f %+v: timeouts %d fast %d seqNAKs %d retransmits %d dups %d srtt %d cwnd %d", loss, sc,
				p.a.q.Stats().Get(CtrTimeouts), p.a.q.Stats().Get(CtrFastRetransmits), p.a.q.Stats().Get(CtrSeqNAKsRecv), p.a.q.Stats().Get(CtrRetransmits), p.b.q.Stats().Get(CtrDuplicates), p.a.q.win.srtt, p.a.q.win.cwnd)
			return step, ab.sent
		}
	}
	t.Fatal("simulation did not finish")
	return 0, 0
}

// TestGoodputUnderLoss measures on a simulated wire how long RDMA WRITEs
// take with 5 % loss in both directions compared with no loss, on three
// paths: fast (4 frames/µs, 25 µs one way: a bandwidth-delay product of 200
// frames), relay (0.25 frames/µs, 48 µs: 24 frames) and veth (0.25
// frames/µs, 16 µs: 8 frames), each with a 256-frame transmit ring. The
// adaptive window must beat the fixed one under loss, keep the goodput it
// reached (fast 6 %, relay 33 %, veth 54 % of loss-free at the time of
// writing; go-back-N resends all in flight after each loss, which bounds it
// near 1/(1 + loss × bandwidth-delay product), so the fast path cannot
// reach much more without selective repeat), and not slow the clean run by
// more than 2 % (its slow start from 128 PSNs costs two round trips where
// the bandwidth-delay product is 200 frames).
func TestGoodputUnderLoss(t *testing.T) {
	total := 8 << 20
	if *long {
		total = 32 << 20
	}
	for _, path := range []struct {
		name              string
		rate, delay, step int
		timeout           uint8
		floor             float64 // goodput of the adaptive window under loss, at least
	}{{"fast", 4, 25, 1000, 9, 0.05}, {"relay", 1, 12, 4000, 10, 0.30}, {"veth", 1, 4, 4000, 8, 0.48}} {
		var good [2]float64
		var clean [2]int
		for i, fixed := range []bool{false, true} {
			sc := simCfg{rate: path.rate, delay: path.delay, stepNs: int64(path.step), timeout: path.timeout, fixed: fixed}
			c, sent0 := simulate(t, 0, total, sc)
			lossy, sent := simulate(t, 0.05, total, sc)
			clean[i], good[i] = c, float64(c)/float64(lossy)
			t.Logf("%s, fixed window %v: %.1f ms clean (%d frames), %.1f ms with 5%% loss (%d frames): goodput %.0f %% of clean",
				path.name, fixed, float64(c)*float64(path.step)/1e6, sent0, float64(lossy)*float64(path.step)/1e6, sent, 100*good[i])
		}
		if float64(clean[0]) > 1.02*float64(clean[1]) {
			t.Errorf("%s: the adaptive window slows the clean run (%d vs %d steps)", path.name, clean[0], clean[1])
		}
		if good[0] < path.floor {
			t.Errorf("%s: goodput under loss %.0f %% of clean, want at least %.0f %%", path.name, 100*good[0], 100*path.floor)
		}
		if good[0] < good[1] {
			t.Errorf("%s: the adaptive window does worse under loss (%.2f vs %.2f)", path.name, good[0], good[1])
		}
	}
}
