package roce_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestDataPathNoAllocs: once warm, a post and its completion allocate
// nothing anywhere in the process (both engines, both QPs, the pipe).
//
// Also with two engines per device over crossed pipe queues
// (engines_test.go), where every frame is handed from one engine to the
// other.
func TestDataPathNoAllocs(t *testing.T) {
	t.Run("one-engine", func(t *testing.T) {
		p, _, _ := newPipeDevices(t, pipe.Config{})
		runNoAllocs(t, p)
	})
	t.Run("two-engines-handoff", func(t *testing.T) {
		p := newEnginePair(t, 2, true, roce.Options{})
		runNoAllocs(t, p)
		if st := p.b.Stats(); st.Handoffs == 0 {
			t.Errorf("crossed queues: no handoffs")
		}
	})
}

func runNoAllocs(t *testing.T, p *devPair) {
	x, y := connectRC(t, p, connCfg{})
	for _, c := range []struct {
		name string
		wr   roce.SendWR
	}{
		{"WRITE", roce.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 5000)},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}},
		{"READ", roce.SendWR{Opcode: qp.WRRDMARead, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 5000)},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}},
		{"FETCH_ADD", roce.SendWR{Opcode: qp.WRAtomicFetchAdd, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 8)},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey(), CompareAdd: 1}},
		{"SEND", roce.SendWR{Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 3000)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var wcs [1]roce.WC
			rsgl := []roce.SGE{y.sge(0, 4096)}
			run := func() {
				if c.wr.Opcode == qp.WRSend {
					if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: rsgl}); err != nil {
						t.Fatal(err)
					}
				}
				if err := x.qp.PostSend(c.wr); err != nil {
					t.Fatal(err)
				}
				if n, err := x.scq.Wait(t.Context(), wcs[:]); n != 1 || err != nil || wcs[0].Status != qp.WCSuccess {
					t.Fatalf("completion %+v, %v", wcs[0], err)
				}
				if c.wr.Opcode == qp.WRSend {
					if n, err := y.rcq.Wait(t.Context(), wcs[:]); n != 1 || err != nil || wcs[0].Status != qp.WCSuccess {
						t.Fatalf("receive completion %+v, %v", wcs[0], err)
					}
				}
			}
			for i := 0; i < 200; i++ {
				run()
			}
			if a := testing.AllocsPerRun(500, run); a != 0 {
				t.Errorf("%v allocations per %s round trip, want 0", a, c.name)
			}
		})
	}
}

// TestCloseFlushes: Close completes outstanding work with WR_FLUSH_ERR, is
// idempotent, and later calls fail with ErrClosed.
func TestCloseFlushes(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x, y := connectRC(t, p, connCfg{}) // RNR retry forever: the SEND never completes
	if err := x.qp.PostSend(roce.SendWR{ID: 5, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 10)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostRecv(roce.RecvWR{ID: 6, SGL: []roce.SGE{x.sge(0, 10)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	_ = y
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got := map[uint64]qp.WCStatus{}
	for _, cq := range []*roce.CQ{x.scq, x.rcq} {
		var wcs [4]roce.WC
		n, _ := cq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			got[wc.ID] = wc.Status
		}
	}
	if got[5] != qp.WCWRFlushErr || got[6] != qp.WCWRFlushErr || len(got) != 2 {
		t.Fatalf("completions after Close: %v, want WR 5 and 6 flushed", got)
	}
	// The QPs are gone with the device: posting fails at once instead of
	// waiting for an engine that no longer runs.
	if err := x.qp.PostSend(roce.SendWR{ID: 7, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 10)}}); err == nil {
		t.Error("PostSend after Close succeeded")
	}
	if _, err := p.a.CreateCQ(4); !errors.Is(err, roce.ErrClosed) {
		t.Errorf("CreateCQ after Close: %v", err)
	}
	if _, err := x.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: x.scq, RecvCQ: x.rcq}); !errors.Is(err, roce.ErrClosed) {
		t.Errorf("CreateQP after Close: %v", err)
	}
}

// TestDestroyQP: a destroyed QP flushes its receives, its QPN stops
// receiving (frames counted as unknown QPN) and its PD can be freed.
func TestDestroyQP(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x, y := connectRC(t, p, connCfg{})
	if err := y.qp.PostRecv(roce.RecvWR{ID: 9, SGL: []roce.SGE{y.sge(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, y.rcq, 9, qp.WCWRFlushErr)
	if err := y.qp.Destroy(); err == nil {
		t.Error("second Destroy succeeded")
	}
	before := p.b.Stats().DropUnknownQPN
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, SGL: []roce.SGE{x.sge(0, 10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.b.Stats().DropUnknownQPN == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if p.b.Stats().DropUnknownQPN == before {
		t.Error("frames for the destroyed QPN were not dropped as unknown")
	}
	if err := y.mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := y.pd.Dealloc(); err != nil {
		t.Errorf("Dealloc after destroying the QP and deregistering the MR: %v", err)
	}
}

// TestCapture: Options.Capture records every frame in both directions as
// pcapng, and the frames decode.
func TestCapture(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	a, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{addrA}, Capture: &buf})
	if err != nil {
		t.Fatal(err)
	}
	b, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{addrB}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x, y := connectRC(t, &devPair{a: a, b: b}, connCfg{})
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 3000)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 1, qp.WCSuccess)
	st := a.Stats()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := capture.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var f capture.Frame
	var in, out int
	var ops []wire.Opcode
	for {
		if err := r.Next(&f); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var pkt wire.Packet
		if err := pkt.Decode(f.Data); err != nil {
			t.Fatalf("frame %d: %v", f.Index, err)
		}
		ops = append(ops, pkt.BTH.Opcode)
		switch f.Dir {
		case capture.DirInbound:
			in++
		case capture.DirOutbound:
			out++
		}
	}
	if uint64(in) != st.RxFrames || uint64(out) != st.TxFrames {
		t.Errorf("capture holds %d in, %d out; the device counted %d received, %d sent", in, out, st.RxFrames, st.TxFrames)
	}
	want := []wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCAck}
	if len(ops) != len(want) {
		t.Fatalf("captured opcodes %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("captured opcodes %v, want %v", ops, want)
		}
	}
}

// TestNewDeviceErrors: bad arguments give errors, not panics.
func TestNewDeviceErrors(t *testing.T) {
	if _, err := roce.NewDevice(nil, nil); err == nil {
		t.Error("nil link accepted")
	}
	la, _, err := pipe.New(pipe.Config{MTU: 200})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roce.NewDevice(la, nil); err == nil {
		t.Error("a 200-byte MTU link accepted")
	}
	p, _, _ := newPipeDevices(t, pipe.Config{})
	if _, err := p.a.CreateCQ(0); err == nil {
		t.Error("CQ depth 0 accepted")
	}
	if _, err := p.a.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC}); err == nil {
		t.Error("QP without CQs accepted")
	}
	if _, err := p.a.GID(99); err == nil {
		t.Error("GID index 99 accepted")
	}
	if _, err := p.a.CreateAH(netip.MustParseAddr("2001:db8::1"), 5, 1); err == nil {
		t.Error("IPv6 address handle on an IPv4-only device accepted")
	}
	if _, err := roce.ParseLinkKind("tcp"); err == nil {
		t.Error("link kind tcp accepted")
	}
}
