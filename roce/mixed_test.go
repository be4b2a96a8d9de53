package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// Layout of each side's buffer in the mixed test.
const (
	mixRegion  = 2 << 20                         // bytes of each region
	mixSrc     = 0                               // x: WRITE/SEND source; y: WRITE destination (same offsets)
	mixRead    = mixRegion                       // y: READ source; x: READ destination (same offsets)
	mixSlots   = 2 * mixRegion                   // y: receive slots
	mixSlotLen = 64 << 10                        // bytes per receive slot
	mixNSlots  = 16                              // receive slots posted
	mixAtomic  = mixSlots + mixNSlots*mixSlotLen // y: the FETCH_ADD counter; x: results
	mixBuf     = mixAtomic + 64*8
	mixWindow  = 32 // outstanding WRs per QP
	mixMaxMsg  = 64 << 10
)

type mixOp struct {
	op       qp.WROpcode
	off, n   int
	add      uint64
	wantOrig uint64
}

// TestMixedLossyPipe: 64 MiB (256 MiB with -long) of mixed SEND, WRITE, READ
// and FETCH_ADD traffic on 4 QPs over a pipe with 5 % loss, 2 % reorder,
// 1 % duplication and 0.1 % corruption each way completes byte-exact, and
// every atomic is applied exactly once.
func TestMixedLossyPipe(t *testing.T) {
	total := int64(64 << 20)
	if *long {
		total = 256 << 20
	}
	if testing.Short() {
		total = 8 << 20
	}
	f := pipe.Faults{Loss: 0.05, Reorder: 0.02, Duplicate: 0.01, Corrupt: 0.001}
	p, la, lb := newPipeDevices(t, pipe.Config{Seed: 42, AtoB: f, BtoA: f})
	start := time.Now()
	runMixed(t, p, total, 4)
	el := time.Since(start)
	sa, sb := la.Stats(), lb.Stats()
	da, db := p.a.Stats(), p.b.Stats()
	t.Logf("%d MiB in %v; pipe a→b %+v; b→a %+v", total>>20, el.Round(time.Millisecond), sa, sb)
	t.Logf("device a %+v", da)
	t.Logf("device b %+v", db)
	if sa.Lost == 0 || sb.Lost == 0 || sa.Reordered == 0 || sa.Duplicated == 0 || sa.Corrupted+sb.Corrupted == 0 {
		t.Errorf("the pipe did not inject every fault: a→b %+v, b→a %+v", sa, sb)
	}
	if da.Retransmits == 0 {
		t.Error("no retransmissions counted on a lossy path")
	}
	if da.DropBadICRC+db.DropBadICRC+da.DropMalformed+db.DropMalformed == 0 {
		t.Error("no corrupted frame was dropped")
	}
}

// runMixed moves total bytes of mixed traffic from p.a to p.b over nQP
// connections and checks everything.
func runMixed(t *testing.T, p *devPair, total int64, nQP int) {
	o := roce.DefaultConnectOptions()
	o.Timeout = 10 // ≈ 4 ms
	o.MinRNRTimer = 1
	var wg sync.WaitGroup
	errs := make(chan error, 2*nQP)
	for i := 0; i < nQP; i++ {
		x, y := connectRC(t, p, connCfg{bufSize: mixBuf, maxWR: 64, cqDepth: 256, window: 64, opts: &o})
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range x.buf[:mixRegion] {
			x.buf[j] = byte(rng.Uint32())
		}
		for j := mixRead; j < mixRead+mixRegion; j++ {
			y.buf[j] = byte(rng.Uint32())
		}
		sends := make(chan mixOp, 1<<16)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := mixReceiver(y, x.buf[mixSrc:mixSrc+mixRegion], sends); err != nil {
				errs <- fmt.Errorf("qp %d receiver: %w", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := mixSender(x, y, total/int64(nQP), uint64(i), sends); err != nil {
				errs <- fmt.Errorf("qp %d sender: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func mixSender(x, y *side, budget int64, seed uint64, sends chan<- mixOp) error {
	defer close(sends)
	rng := rand.New(rand.NewPCG(seed, 99))
	var ops [mixWindow * 2]mixOp
	wrote := make([]bool, mixRegion)
	read := make([]bool, mixRegion)
	var posted, done uint64
	var bytesPosted int64
	var sum uint64
	ne := binary.NativeEndian
	var wcs [16]roce.WC
	deadline := time.Now().Add(5 * time.Minute)
	for bytesPosted < budget || done < posted {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out with %d of %d WRs done", done, posted)
		}
		if bytesPosted < budget && posted-done < mixWindow {
			k := posted
			op := mixOp{n: 1 + rng.IntN(mixMaxMsg)}
			op.off = rng.IntN(mixRegion - op.n)
			wr := roce.SendWR{ID: k, Flags: qp.Signaled}
			switch rng.IntN(4) {
			case 0:
				op.op = qp.WRSend
				wr.SGL = []roce.SGE{x.sge(mixSrc+op.off, op.n)}
			case 1:
				op.op = qp.WRRDMAWrite
				wr.SGL = []roce.SGE{x.sge(mixSrc+op.off, op.n)}
				wr.RemoteAddr, wr.RKey = y.mr.Addr()+uint64(mixSrc+op.off), y.mr.RKey()
				for j := op.off; j < op.off+op.n; j++ {
					wrote[j] = true
				}
			case 2:
				op.op = qp.WRRDMARead
				wr.SGL = []roce.SGE{x.sge(mixRead+op.off, op.n)}
				wr.RemoteAddr, wr.RKey = y.mr.Addr()+uint64(mixRead+op.off), y.mr.RKey()
				for j := op.off; j < op.off+op.n; j++ {
					read[j] = true
				}
			case 3:
				op.op = qp.WRAtomicFetchAdd
				op.n = 8
				op.add = k + 1
				op.wantOrig = sum
				sum += op.add
				wr.SGL = []roce.SGE{x.sge(mixAtomic+int(k%64)*8, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = y.mr.Addr()+mixAtomic, y.mr.RKey(), op.add
			}
			wr.Opcode = op.op
			if err := x.qp.PostSend(wr); err != nil {
				return fmt.Errorf("post %d: %w", k, err)
			}
			if op.op == qp.WRSend {
				sends <- op
			}
			ops[k%uint64(len(ops))] = op
			posted++
			bytesPosted += int64(op.n)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := x.scq.Wait(ctx, wcs[:])
		cancel()
		if err != nil {
			return fmt.Errorf("wait with %d of %d WRs done: %w", done, posted, err)
		}
		for _, wc := range wcs[:n] {
			if wc.ID != done {
				return fmt.Errorf("completion for WR %d, expected %d", wc.ID, done)
			}
			op := ops[wc.ID%uint64(len(ops))]
			if wc.Status != qp.WCSuccess || op.op == qp.WRRDMARead && int(wc.ByteLen) != op.n {
				return fmt.Errorf("WR %d %v: completion %+v (%v)", wc.ID, op.op, wc, wc.Status)
			}
			if op.op == qp.WRAtomicFetchAdd {
				if got := ne.Uint64(x.buf[mixAtomic+int(wc.ID%64)*8:]); got != op.wantOrig {
					return fmt.Errorf("FETCH_ADD %d returned %d, want %d", wc.ID, got, op.wantOrig)
				}
			}
			done++
		}
	}
	// Every byte written or read is the source's.
	for j := 0; j < mixRegion; j++ {
		if wrote[j] && y.buf[mixSrc+j] != x.buf[mixSrc+j] {
			return fmt.Errorf("WRITE data differs at offset %d", j)
		}
		if read[j] && x.buf[mixRead+j] != y.buf[mixRead+j] {
			return fmt.Errorf("READ data differs at offset %d", j)
		}
	}
	if got := ne.Uint64(y.buf[mixAtomic:]); got != sum {
		return fmt.Errorf("FETCH_ADD counter %d, want %d (an atomic was applied twice or lost)", got, sum)
	}
	return nil
}

// mixReceiver keeps receives posted on y and checks each SEND against the
// next expected one.
func mixReceiver(y *side, src []byte, sends <-chan mixOp) error {
	for s := 0; s < mixNSlots; s++ {
		if err := y.qp.PostRecv(roce.RecvWR{ID: uint64(s), SGL: []roce.SGE{y.sge(mixSlots+s*mixSlotLen, mixSlotLen)}}); err != nil {
			return err
		}
	}
	var wcs [16]roce.WC
	got := 0
	for op := range sends {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := y.rcq.Wait(ctx, wcs[:1])
		cancel()
		if err != nil {
			return fmt.Errorf("wait for SEND %d: %w", got, err)
		}
		wc := wcs[0]
		if wc.Status != qp.WCSuccess || wc.Opcode != qp.WCRecv || int(wc.ByteLen) != op.n {
			return fmt.Errorf("SEND %d: completion %+v (%v), want %d bytes", got, wc, wc.Status, op.n)
		}
		slot := int(wc.ID)
		data := y.buf[mixSlots+slot*mixSlotLen:][:op.n]
		if !bytes.Equal(data, src[op.off:op.off+op.n]) {
			return fmt.Errorf("SEND %d (%d bytes from offset %d): data differs", got, op.n, op.off)
		}
		got++
		if err := y.qp.PostRecv(roce.RecvWR{ID: uint64(slot), SGL: []roce.SGE{y.sge(mixSlots+slot*mixSlotLen, mixSlotLen)}}); err != nil {
			return err
		}
	}
	return nil
}
