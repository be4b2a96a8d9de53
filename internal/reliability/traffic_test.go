package reliability

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// Mixed traffic between two devices: on each RC connection the requester x
// (device a) keeps a window of WRITEs, READs, FETCH_ADDs and SENDs posted;
// every completion is checked at once against the memory it moved.
//
// Layout of each side's buffer (chunks of trafChunk bytes):
//
//	x: [ WRITE sources | READ destinations | SEND sources | atomic results ]
//	y: [ WRITE destinations | READ sources | receive slots | counter ]
const (
	trafChunks = 16
	trafWindow = 16 // outstanding WRs per connection (≤ trafChunks: a chunk is reused only after its last WR completed)
	trafSend   = 4096
)

type trafficConfig struct {
	conns    int
	chunk    int           // bytes per WRITE/READ (default 64 KiB)
	total    int64         // WRITE+READ+SEND payload bytes to move over all connections (0: run for dur)
	dur      time.Duration // with total == 0
	opts     roce.ConnectOptions
	window   int                                      // QPConfig.SendWindow (0: default)
	mix      string                                   // operations in turn: W(RITE) R(EAD) A(tomic) S(END); default "WWWRRRAS"
	progress func(moved int64, elapsed time.Duration) // called about once a second, if set
}

type trafficResult struct {
	bytes      int64 // payload moved
	ops        int64
	atomics    int64
	sends      int64
	elapsed    time.Duration
	goodputMBs float64
}

func (r trafficResult) String() string {
	return fmt.Sprintf("%.1f MiB in %v (%.1f MB/s goodput), %d ops (%d FETCH_ADD, %d SEND)",
		float64(r.bytes)/(1<<20), r.elapsed.Round(time.Millisecond), r.goodputMBs, r.ops, r.atomics, r.sends)
}

// trafConn is one connection's state, owned by its goroutine.
type trafConn struct {
	id                 int
	c                  rcPair
	rcq                *roce.CQ // y's receive CQ
	xbuf, ybuf         []byte
	xm, ym             *roce.MR
	chunk              int
	wsrc, rdst, ssrc   int // offsets in xbuf
	res                int
	wdst, rsrc, rslots int // offsets in ybuf
	counter            int
	gen                uint64
	nsend              int
	failed             bool   // an atomic may have been applied without its completion
	atomics            uint64 // FETCH_ADDs completed
	pending            [trafWindow * 2]pendingOp
}

type pendingOp struct {
	op    qp.WROpcode
	chunk int
	slot  int
}

// runTraffic moves cfg.total bytes (or runs for cfg.dur) of mixed traffic
// from a to b over cfg.conns connections and fails t on any error, wrong
// byte or lost or duplicated atomic.
func runTraffic(t *testing.T, a, b *roce.Device, cfg trafficConfig) trafficResult {
	t.Helper()
	if cfg.chunk == 0 {
		cfg.chunk = 64 << 10
	}
	pdA, pdB := a.AllocPD(), b.AllocPD()
	conns := make([]*trafConn, cfg.conns)
	for i := range conns {
		tc := &trafConn{id: i, chunk: cfg.chunk}
		region := trafChunks * cfg.chunk
		tc.wsrc, tc.rdst, tc.ssrc = 0, region, 2*region
		tc.res = 2*region + trafChunks*trafSend
		tc.wdst, tc.rsrc, tc.rslots = 0, region, 2*region
		tc.counter = 2*region + trafChunks*trafSend
		tc.xbuf = make([]byte, tc.res+trafChunks*2*8)
		tc.ybuf = make([]byte, tc.counter+8)
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := tc.rsrc; j < tc.rsrc+region; j += 8 {
			binary.LittleEndian.PutUint64(tc.ybuf[j:], rng.Uint64())
		}
		var err error
		if tc.xm, err = pdA.RegMR(tc.xbuf, roce.LocalWrite); err != nil {
			t.Fatal(err)
		}
		if tc.ym, err = pdB.RegMR(tc.ybuf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic); err != nil {
			t.Fatal(err)
		}
		xcq, _ := a.CreateCQ(4 * trafWindow)
		ycq, _ := b.CreateCQ(4 * trafWindow)
		tc.c = connectPairCfg(t, pdA, pdB, xcq, ycq, roce.QPConfig{MaxSendWR: 2 * trafWindow, MaxRecvWR: 2 * trafWindow,
			SendWindow: cfg.window}, &cfg.opts)
		tc.rcq = ycq
		for s := range trafChunks {
			if err := tc.c.y.PostRecv(roce.RecvWR{ID: uint64(s), SGL: sgeOf(tc.ym, tc.rslots+s*trafSend, trafSend)}); err != nil {
				t.Fatal(err)
			}
		}
		conns[i] = tc
	}
	var moved, ops, atomics, sends atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	start := time.Now()
	stop := make(chan struct{})
	progressDone := make(chan struct{})
	if cfg.progress == nil {
		close(progressDone)
	} else {
		go func() {
			defer close(progressDone)
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					cfg.progress(moved.Load(), time.Since(start))
				}
			}
		}()
	}
	done := func() bool {
		if cfg.total > 0 {
			return moved.Load() >= cfg.total
		}
		return time.Since(start) >= cfg.dur
	}
	mix := cfg.mix
	if mix == "" {
		mix = "WWWRRRAS"
	}
	for _, tc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tc.run(mix, done, &moved, &ops, &atomics, &sends); err != nil {
				tc.failed = true
				errs <- fmt.Errorf("connection %d: %w (after %v; requester %s; responder %s)", tc.id, err,
					time.Since(start).Round(time.Millisecond), qpCounters(tc.c.x), qpCounters(tc.c.y))
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-progressDone
	el := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, tc := range conns {
		if got := binary.NativeEndian.Uint64(tc.ybuf[tc.counter:]); !tc.failed && got != tc.atomics {
			t.Errorf("connection %d: counter %d after %d FETCH_ADDs", tc.id, got, tc.atomics)
		}
	}
	r := trafficResult{bytes: moved.Load(), ops: ops.Load(), atomics: atomics.Load(), sends: sends.Load(), elapsed: el}
	r.goodputMBs = float64(r.bytes) / el.Seconds() / 1e6
	return r
}

// qpCounters formats a queue pair's state and counters.
func qpCounters(q *roce.QP) string {
	return fmt.Sprintf("%v %+v", q.State(), q.Stats())
}

// run is one connection's loop: keep trafWindow WRs posted, check each
// completion, stop posting when done() and drain.
func (tc *trafConn) run(mix string, done func() bool, moved, ops, atomics, sends *atomic.Int64) error {
	x := tc.c.x
	var wcs [2 * trafWindow]roce.WC
	var rwcs [trafChunks]roce.WC
	head, tail := 0, 0 // pending ring: posted [tail, head)
	k := 0
	nextRecv := 0
	lastProgress := time.Now()
	for {
		for head-tail < trafWindow && !done() {
			p := pendingOp{chunk: k % trafChunks, slot: k % trafChunks}
			var wr roce.SendWR
			wr.ID, wr.Flags = uint64(head), qp.Signaled
			switch mix[k%len(mix)] {
			case 'W': // WRITE, fresh content each time
				p.op = qp.WRRDMAWrite
				tc.gen++
				src := tc.xbuf[tc.wsrc+p.chunk*tc.chunk:][:tc.chunk]
				for j := 0; j < len(src); j += 8 {
					binary.LittleEndian.PutUint64(src[j:], tc.gen*0x9E3779B97F4A7C15^uint64(j))
				}
				wr.Opcode, wr.SGL = p.op, sgeOf(tc.xm, tc.wsrc+p.chunk*tc.chunk, tc.chunk)
				wr.RemoteAddr, wr.RKey = tc.ym.Addr()+uint64(tc.wdst+p.chunk*tc.chunk), tc.ym.RKey()
			case 'R': // READ into a cleared destination
				p.op = qp.WRRDMARead
				clear(tc.xbuf[tc.rdst+p.chunk*tc.chunk:][:tc.chunk])
				wr.Opcode, wr.SGL = p.op, sgeOf(tc.xm, tc.rdst+p.chunk*tc.chunk, tc.chunk)
				wr.RemoteAddr, wr.RKey = tc.ym.Addr()+uint64(tc.rsrc+p.chunk*tc.chunk), tc.ym.RKey()
			case 'A': // FETCH_ADD
				p.op = qp.WRAtomicFetchAdd
				wr.Opcode, wr.SGL = p.op, sgeOf(tc.xm, tc.res+p.slot*8, 8)
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = tc.ym.Addr()+uint64(tc.counter), tc.ym.RKey(), 1
			default: // SEND, checked on the receive side
				p.op = qp.WRSend
				p.slot = tc.nsend % trafChunks // the receiver's slot too
				tc.nsend++
				tc.gen++
				src := tc.xbuf[tc.ssrc+p.slot*trafSend:][:trafSend]
				for j := 0; j < len(src); j += 8 {
					binary.LittleEndian.PutUint64(src[j:], tc.gen^uint64(j)<<32)
				}
				wr.Opcode, wr.SGL = p.op, sgeOf(tc.xm, tc.ssrc+p.slot*trafSend, trafSend)
			}
			if err := x.PostSend(wr); err != nil {
				return fmt.Errorf("post %v: %w", p.op, err)
			}
			tc.pending[head%len(tc.pending)] = p
			head++
			k++
		}
		if head == tail {
			return nil
		}
		n, err := tc.c.xcq.Poll(wcs[:])
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.ID != uint64(tail) {
				return fmt.Errorf("completion %d, expected %d", wc.ID, tail)
			}
			p := tc.pending[tail%len(tc.pending)]
			tail++
			if wc.Status != qp.WCSuccess {
				return fmt.Errorf("%v completed with %v", p.op, wc.Status)
			}
			ops.Add(1)
			switch p.op {
			case qp.WRRDMAWrite:
				off := p.chunk * tc.chunk
				if !bytes.Equal(tc.ybuf[tc.wdst+off:][:tc.chunk], tc.xbuf[tc.wsrc+off:][:tc.chunk]) {
					return fmt.Errorf("WRITE of chunk %d: destination differs from the source", p.chunk)
				}
				moved.Add(int64(tc.chunk))
			case qp.WRRDMARead:
				off := p.chunk * tc.chunk
				if !bytes.Equal(tc.xbuf[tc.rdst+off:][:tc.chunk], tc.ybuf[tc.rsrc+off:][:tc.chunk]) {
					return fmt.Errorf("READ of chunk %d: destination differs from the source", p.chunk)
				}
				moved.Add(int64(tc.chunk))
			case qp.WRAtomicFetchAdd:
				// Only this connection adds to its counter, and RC executes
				// in order: the k-th FETCH_ADD must return k.
				v := binary.NativeEndian.Uint64(tc.xbuf[tc.res+p.slot*8:])
				if v != tc.atomics {
					return fmt.Errorf("FETCH_ADD %d returned %d (lost, applied twice or replayed wrongly)", tc.atomics, v)
				}
				tc.atomics++
				atomics.Add(1)
			case qp.WRSend:
				sends.Add(1)
				moved.Add(trafSend)
			}
			lastProgress = time.Now()
		}
		// Receive side of the SENDs: in order, into slot nextRecv.
		rn, err := tc.rcq.Poll(rwcs[:])
		if err != nil {
			return err
		}
		for _, wc := range rwcs[:rn] {
			s := nextRecv % trafChunks
			if wc.Status != qp.WCSuccess || wc.ID != uint64(s) || wc.ByteLen != trafSend {
				return fmt.Errorf("receive completion %+v, expected slot %d", wc, s)
			}
			// The sender's source slot s is not reused before this SEND
			// completed at the sender, which follows the receive.
			if !bytes.Equal(tc.ybuf[tc.rslots+s*trafSend:][:trafSend], tc.xbuf[tc.ssrc+s*trafSend:][:trafSend]) {
				return fmt.Errorf("SEND into slot %d: received bytes differ", s)
			}
			if err := tc.c.y.PostRecv(roce.RecvWR{ID: uint64(s), SGL: sgeOf(tc.ym, tc.rslots+s*trafSend, trafSend)}); err != nil {
				return err
			}
			nextRecv++
		}
		if n == 0 && rn == 0 {
			if time.Since(lastProgress) > 20*time.Second {
				return fmt.Errorf("no completion for 20 s (%d WRs outstanding)", head-tail)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// TestTrafficLossyPipe: the traffic generator over link/pipe with 5 % loss,
// 2 % reorder, 1 % duplication and 0.1 % corruption both ways, 8
// connections, against the same without faults.
func TestTrafficLossyPipe(t *testing.T) {
	total := int64(32 << 20)
	if testing.Short() {
		total = 8 << 20
	}
	f := pipe.Faults{Loss: 0.05, Reorder: 0.02, Duplicate: 0.01, Corrupt: 0.001}
	o := roce.DefaultConnectOptions()
	o.Timeout, o.MinRNRTimer = 10, 1 // ≈ 4 ms
	if raceEnabled {
		o.Timeout = 15 // ≈ 134 ms: round trips take several ms under -race
	}
	var res [2]trafficResult
	for i, faults := range []pipe.Faults{{}, f} {
		a, b, la, lb := newPipePair(t, pipe.Config{Seed: 9, AtoB: faults, BtoA: faults, TxBuffers: 1024})
		res[i] = runTraffic(t, a, b, trafficConfig{conns: 8, total: total, opts: o, window: 64})
		t.Logf("faults %+v: %v; pipe a→b %+v b→a %+v", faults, res[i], la.Stats(), lb.Stats())
		t.Logf("  device a %+v", a.Stats())
		if i == 1 && (la.Stats().Lost == 0 || a.Stats().Retransmits == 0) {
			t.Error("the faults did not happen")
		}
	}
	t.Logf("goodput with faults %.0f %% of without", 100*res[1].goodputMBs/res[0].goodputMBs)
}
