package roce_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// expectStatus waits for a send completion with ID id and status want.
func expectStatus(t *testing.T, cq *roce.CQ, id uint64, want qp.WCStatus) roce.WC {
	t.Helper()
	wc := waitWC(t, cq)
	if wc.ID != id || wc.Status != want {
		t.Fatalf("completion %+v (status %v), want ID %d with %v", wc, wc.Status, id, want)
	}
	return wc
}

func TestErrorPathsPipe(t *testing.T) {
	runErrorPaths(t, func(t *testing.T) *devPair {
		p, _, _ := newPipeDevices(t, pipe.Config{})
		return p
	})
}

// runErrorPaths runs each error case on a fresh pair of devices from mk.
func runErrorPaths(t *testing.T, mk func(t *testing.T) *devPair) {
	// victim checks that y's buffer did not change.
	snapshot := func(s *side) []byte { return append([]byte(nil), s.buf...) }
	unchanged := func(t *testing.T, s *side, before []byte) {
		t.Helper()
		if !bytes.Equal(s.buf, before) {
			t.Fatal("the victim's memory changed")
		}
	}
	write := func(x *side, id uint64, n int, va uint64, rkey uint32) roce.SendWR {
		return roce.SendWR{ID: id, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(0, n)}, RemoteAddr: va, RKey: rkey}
	}

	t.Run("bad rkey", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{})
		fill(x.buf, 3)
		before := snapshot(y)
		if err := x.qp.PostSend(write(x, 1, 3000, y.mr.Addr(), y.mr.RKey()^0x5a5a)); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRemAccessErr)
		unchanged(t, y, before)
		// The QP is in error now: later WRs are flushed.
		if err := x.qp.PostSend(write(x, 2, 10, y.mr.Addr(), y.mr.RKey())); err == nil {
			expectStatus(t, x.scq, 2, qp.WCWRFlushErr)
		}
		unchanged(t, y, before)
	})

	t.Run("out of bounds", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{bufSize: 8192})
		fill(x.buf, 4)
		before := snapshot(y)
		// Starts inside the region, ends 10 bytes past it.
		if err := x.qp.PostSend(write(x, 1, 100, y.mr.Addr()+8192-90, y.mr.RKey())); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRemAccessErr)
		unchanged(t, y, before)
	})

	t.Run("out of bounds READ", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{bufSize: 8192})
		before := snapshot(x)
		if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(0, 200)}, RemoteAddr: y.mr.Addr() - 100, RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRemAccessErr)
		unchanged(t, x, before)
	})

	t.Run("missing access flag", func(t *testing.T) {
		p := mk(t)
		x, y := connectRC(t, p, connCfg{})
		// A second region on y without REMOTE_WRITE.
		ro := make([]byte, 4096)
		fill(ro, 9)
		m, err := y.pd.RegMR(ro, roce.RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		before := append([]byte(nil), ro...)
		if err := x.qp.PostSend(write(x, 1, 100, m.Addr(), m.RKey())); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRemAccessErr)
		if !bytes.Equal(ro, before) {
			t.Fatal("a region without REMOTE_WRITE was written")
		}
	})

	t.Run("atomic without access", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{access: roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead})
		before := snapshot(y)
		if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRAtomicFetchAdd, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(0, 8)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey(), CompareAdd: 1}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRemAccessErr)
		unchanged(t, y, before)
	})

	t.Run("READ on a QP without remote read", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{qpAccess: roce.LocalWrite | roce.RemoteWrite})
		fill(y.buf, 5)
		before := snapshot(x)
		if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(0, 100)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, x.scq)
		// rxe answers an operation the QP does not allow with an invalid
		// request NAK (class E).
		if wc.ID != 1 || (wc.Status != qp.WCRemInvReqErr && wc.Status != qp.WCRemAccessErr) {
			t.Fatalf("completion %+v (%v), want REM_INV_REQ_ERR", wc, wc.Status)
		}
		unchanged(t, x, before)
	})

	t.Run("retry exhausted, peer gone", func(t *testing.T) {
		p := mk(t)
		o := roce.DefaultConnectOptions()
		o.Timeout = 6 // 262 µs
		o.RetryCnt = 2
		x, y := connectRC(t, p, connCfg{opts: &o})
		_ = y
		if err := p.b.Close(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := x.qp.PostSend(write(x, 1, 100, y.mr.Addr(), y.mr.RKey())); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(write(x, 2, 100, y.mr.Addr(), y.mr.RKey())); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRetryExcErr)
		expectStatus(t, x.scq, 2, qp.WCWRFlushErr)
		// 1 + RetryCnt timeouts of ≈ 262 µs each.
		if el := time.Since(start); el < 3*262*time.Microsecond {
			t.Errorf("retries exhausted after %v, faster than 3 timeouts", el)
		}
	})

	t.Run("RNR retry exhausted", func(t *testing.T) {
		o := roce.DefaultConnectOptions()
		o.RNRRetry = 2
		o.MinRNRTimer = 1 // 0.01 ms
		x, y := connectRC(t, mk(t), connCfg{opts: &o})
		before := snapshot(y)
		if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 100)}}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCRNRRetryExcErr)
		unchanged(t, y, before)
	})

	t.Run("RNR then receive posted", func(t *testing.T) {
		o := roce.DefaultConnectOptions()
		o.MinRNRTimer = 1
		x, y := connectRC(t, mk(t), connCfg{opts: &o})
		fill(x.buf[:100], 8)
		if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 100)}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // a few RNR NAKs (rnr_retry 7: forever)
		if err := y.qp.PostRecv(roce.RecvWR{ID: 2, SGL: []roce.SGE{y.sge(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 1, qp.WCSuccess)
		expectStatus(t, y.rcq, 2, qp.WCSuccess)
		if !bytes.Equal(y.buf[:100], x.buf[:100]) {
			t.Fatal("data differs")
		}
	})

	t.Run("send on a QP not in RTS", func(t *testing.T) {
		p := mk(t)
		s := newSide(t, p.a, roce.RC, connCfg{}, 1)
		err := s.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{s.sge(0, 10)}})
		if !errors.Is(err, qp.ErrState) {
			t.Fatalf("PostSend in RESET: %v, want qp.ErrState", err)
		}
		if err := s.qp.Modify(&roce.Attr{State: qp.Init, Access: roce.RemoteWrite}, qp.AttrState|qp.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		err = s.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{s.sge(0, 10)}})
		if !errors.Is(err, qp.ErrState) {
			t.Fatalf("PostSend in INIT: %v, want qp.ErrState", err)
		}
		noWC(t, s.scq, 10*time.Millisecond)
		// A bad transition is refused too: INIT → RTS.
		if err := s.qp.Modify(&roce.Attr{State: qp.RTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
			qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxRdAtomic); err == nil {
			t.Fatal("INIT → RTS accepted")
		}
	})

	t.Run("CQ overflow", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{cqDepth: 4})
		for i := 0; i < 8; i++ {
			if err := x.qp.PostSend(write(x, uint64(i), 64, y.mr.Addr(), y.mr.RKey())); err != nil {
				t.Fatal(err)
			}
		}
		// Wait for the engine to try to complete all eight.
		deadline := time.Now().Add(5 * time.Second)
		var wcs [8]roce.WC
		var err error
		var got int
		for time.Now().Before(deadline) {
			if x.scq.Len() >= 4 {
				time.Sleep(20 * time.Millisecond)
				var n int
				n, err = x.scq.Poll(wcs[:])
				got += n
				if err != nil {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(err, qp.ErrCQOverflow) {
			t.Fatalf("Poll after 8 completions on a 4-deep CQ: got %d, err %v; want qp.ErrCQOverflow", got, err)
		}
	})

	t.Run("MR deregistered during traffic", func(t *testing.T) {
		x, y := connectRC(t, mk(t), connCfg{maxWR: 64})
		fill(x.buf, 6)
		// A stream of 16 KiB WRITEs, 16 outstanding; the victim deregisters
		// its region after 20 have completed.
		const window, maxWRs = 16, 20000
		var posted, ok, failed, flushed int
		var atFailure []byte
		for done := 0; failed == 0 || done < posted; {
			if failed == 0 && posted-done < window && posted < maxWRs {
				off := (posted % 32) * 16384
				if err := x.qp.PostSend(write(x, uint64(posted), 16384, y.mr.Addr()+uint64(off), y.mr.RKey())); err != nil {
					t.Fatal(err)
				}
				posted++
				continue
			}
			if done == maxWRs {
				t.Fatalf("%d WRITEs succeeded after deregistration", ok-20)
			}
			wc := waitWC(t, x.scq)
			done++
			switch {
			case wc.Status == qp.WCSuccess && failed == 0:
				ok++
				if ok == 20 {
					if err := y.mr.Deregister(); err != nil {
						t.Fatal(err)
					}
				}
			case wc.Status == qp.WCRemAccessErr && failed == 0 && ok >= 20:
				failed++
				atFailure = snapshot(y)
			case wc.Status == qp.WCWRFlushErr && failed == 1:
				flushed++
			default:
				t.Fatalf("completion %+v (%v) after %d successes and %d failures", wc, wc.Status, ok, failed)
			}
		}
		t.Logf("%d WRITEs completed, the next failed with REM_ACCESS_ERR, %d flushed", ok, flushed)
		// Messages in flight when the key died may have landed; once the
		// refusal is reported nothing more lands.
		time.Sleep(10 * time.Millisecond)
		unchanged(t, y, atFailure)
		// The old rkey stays refused on a new connection too.
		x2, y2 := connectRC(t, &devPair{a: x.dev, b: y.dev}, connCfg{})
		_ = y2
		if err := x2.qp.PostSend(write(x2, 99, 64, y.mr.Addr(), y.mr.RKey())); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x2.scq, 99, qp.WCRemAccessErr)
		unchanged(t, y, atFailure)
	})
}
