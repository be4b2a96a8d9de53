package roce_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// Offsets in each side's 1 MiB buffer.
const (
	srcOff = 0       // what x sends from
	dstOff = 1 << 19 // where data lands
)

func TestOperationsPipe(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	runOperations(t, p)
}

// runOperations exercises every RC operation between p.a and p.b, checking
// data byte for byte and completions field by field.
func runOperations(t *testing.T, p *devPair) {
	runOperationsCfg(t, p, connCfg{})
}

func runOperationsCfg(t *testing.T, p *devPair, cfg connCfg) {
	x, y := connectRC(t, p, cfg)
	xq, yq := x.qp.QPN(), y.qp.QPN()
	fill(x.buf, 1)
	fill(y.buf, 101)

	diffWC := func(t *testing.T, want, got roce.WC) {
		t.Helper()
		// ibverbs defines byte_len of send completions for READs only
		// (rxe reports the length for every opcode, roce/qp 0 except for
		// READ): accept either.
		if want.Opcode != qp.WCRDMARead && want.Opcode < qp.WCRecv && got.ByteLen == 0 {
			want.ByteLen = 0
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("completion (-want +got):\n%s", d)
		}
	}
	// checkData compares dst with src and checks that the bytes just after
	// dst are untouched (compared with before).
	checkData := func(t *testing.T, what string, got, want []byte, after []byte, afterWant []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: data differs first at byte %d of %d", what, i, len(want))
		}
		if !bytes.Equal(after, afterWant) {
			t.Fatalf("%s: bytes past the end of the message were changed", what)
		}
	}

	for _, n := range []int{0, 1, 100, 1024, 1025, 5000, 65536} {
		t.Run("SEND/"+itoa(n), func(t *testing.T) {
			fill(x.buf[srcOff:srcOff+n], byte(n))
			guard := append([]byte(nil), y.buf[dstOff+n:dstOff+n+64]...)
			if err := y.qp.PostRecv(roce.RecvWR{ID: 7, SGL: []roce.SGE{y.sge(dstOff, 1<<18)}}); err != nil {
				t.Fatal(err)
			}
			if err := x.qp.PostSend(roce.SendWR{ID: 8, Opcode: qp.WRSend, Flags: qp.Signaled,
				SGL: []roce.SGE{x.sge(srcOff, n)}}); err != nil {
				t.Fatal(err)
			}
			diffWC(t, roce.WC{ID: 8, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: uint32(n), QPN: xq}, waitWC(t, x.scq))
			diffWC(t, roce.WC{ID: 7, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: uint32(n), QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
			checkData(t, "SEND", y.buf[dstOff:dstOff+n], x.buf[srcOff:srcOff+n], y.buf[dstOff+n:dstOff+n+64], guard)
		})
	}

	t.Run("SEND/sgl", func(t *testing.T) {
		// Three gather pieces into two scatter pieces.
		fill(x.buf[:9000], 33)
		want := append(append(append([]byte(nil), x.buf[100:1100]...), x.buf[3000:5500]...), x.buf[8000:8500]...)
		if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(dstOff, 1500), y.sge(dstOff+10000, 4000)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRSend, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(100, 1000), x.sge(3000, 2500), x.sge(8000, 500)}}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 2, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: 4000, QPN: xq}, waitWC(t, x.scq))
		diffWC(t, roce.WC{ID: 1, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: 4000, QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
		got := append(append([]byte(nil), y.buf[dstOff:dstOff+1500]...), y.buf[dstOff+10000:dstOff+12500]...)
		if !bytes.Equal(got, want) {
			t.Fatal("scattered data differs")
		}
	})

	t.Run("SEND_WITH_IMM", func(t *testing.T) {
		fill(x.buf[:3000], 9)
		if err := y.qp.PostRecv(roce.RecvWR{ID: 11, SGL: []roce.SGE{y.sge(dstOff, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 12, Opcode: qp.WRSendImm, Flags: qp.Signaled, Imm: 0xdeadbeef,
			SGL: []roce.SGE{x.sge(0, 3000)}}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 12, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: 3000, QPN: xq}, waitWC(t, x.scq))
		diffWC(t, roce.WC{ID: 11, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: 3000, ImmData: 0xdeadbeef,
			WithImm: true, QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
		if !bytes.Equal(y.buf[dstOff:dstOff+3000], x.buf[:3000]) {
			t.Fatal("data differs")
		}
	})

	t.Run("SEND/inline", func(t *testing.T) {
		fill(x.buf[:200], 77)
		want := append([]byte(nil), x.buf[:200]...)
		if err := y.qp.PostRecv(roce.RecvWR{ID: 21, SGL: []roce.SGE{y.sge(dstOff, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 22, Opcode: qp.WRSend, Flags: qp.Signaled | qp.Inline,
			SGL: []roce.SGE{x.sge(0, 200)}}); err != nil {
			t.Fatal(err)
		}
		clear(x.buf[:200]) // inline: the payload was copied at post
		diffWC(t, roce.WC{ID: 22, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: 200, QPN: xq}, waitWC(t, x.scq))
		diffWC(t, roce.WC{ID: 21, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: 200, QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
		if !bytes.Equal(y.buf[dstOff:dstOff+200], want) {
			t.Fatal("inline data differs")
		}
	})

	for _, n := range []int{1, 1024, 10000, 200000} {
		t.Run("RDMA_WRITE/"+itoa(n), func(t *testing.T) {
			fill(x.buf[:n], byte(n>>3))
			guard := append([]byte(nil), y.buf[dstOff+n:dstOff+n+64]...)
			if err := x.qp.PostSend(roce.SendWR{ID: 31, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
				SGL: []roce.SGE{x.sge(0, n)}, RemoteAddr: y.mr.Addr() + dstOff, RKey: y.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			diffWC(t, roce.WC{ID: 31, Status: qp.WCSuccess, Opcode: qp.WCRDMAWrite, ByteLen: uint32(n), QPN: xq}, waitWC(t, x.scq))
			checkData(t, "WRITE", y.buf[dstOff:dstOff+n], x.buf[:n], y.buf[dstOff+n:dstOff+n+64], guard)
			noWC(t, y.rcq, 0) // a plain WRITE consumes no receive
		})
	}

	t.Run("RDMA_WRITE_WITH_IMM", func(t *testing.T) {
		fill(x.buf[:5000], 55)
		if err := y.qp.PostRecv(roce.RecvWR{ID: 41, SGL: nil}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 42, Opcode: qp.WRRDMAWriteImm, Flags: qp.Signaled, Imm: 0x01020304,
			SGL: []roce.SGE{x.sge(0, 5000)}, RemoteAddr: y.mr.Addr() + dstOff + 100, RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 42, Status: qp.WCSuccess, Opcode: qp.WCRDMAWrite, ByteLen: 5000, QPN: xq}, waitWC(t, x.scq))
		diffWC(t, roce.WC{ID: 41, Status: qp.WCSuccess, Opcode: qp.WCRecvRDMAWithImm, ByteLen: 5000,
			ImmData: 0x01020304, WithImm: true, QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
		if !bytes.Equal(y.buf[dstOff+100:dstOff+5100], x.buf[:5000]) {
			t.Fatal("data differs")
		}
	})

	for _, n := range []int{1, 1024, 7000, 200000} {
		t.Run("RDMA_READ/"+itoa(n), func(t *testing.T) {
			fill(y.buf[:n], byte(n>>2)+3)
			guard := append([]byte(nil), x.buf[dstOff+n:dstOff+n+64]...)
			if err := x.qp.PostSend(roce.SendWR{ID: 51, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
				SGL: []roce.SGE{x.sge(dstOff, n)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			diffWC(t, roce.WC{ID: 51, Status: qp.WCSuccess, Opcode: qp.WCRDMARead, ByteLen: uint32(n), QPN: xq}, waitWC(t, x.scq))
			checkData(t, "READ", x.buf[dstOff:dstOff+n], y.buf[:n], x.buf[dstOff+n:dstOff+n+64], guard)
		})
	}

	t.Run("ATOMIC_CMP_AND_SWP", func(t *testing.T) {
		ne := binary.NativeEndian
		ne.PutUint64(y.buf[dstOff:], 1234)
		// A compare that fails leaves memory alone and returns the original.
		for i, c := range []struct{ cmp, swap, wantOrig, wantMem uint64 }{
			{cmp: 99, swap: 5, wantOrig: 1234, wantMem: 1234},
			{cmp: 1234, swap: 0xAABBCCDDEEFF0011, wantOrig: 1234, wantMem: 0xAABBCCDDEEFF0011},
		} {
			if err := x.qp.PostSend(roce.SendWR{ID: uint64(60 + i), Opcode: qp.WRAtomicCmpSwp, Flags: qp.Signaled,
				SGL: []roce.SGE{x.sge(dstOff, 8)}, RemoteAddr: y.mr.Addr() + dstOff, RKey: y.mr.RKey(),
				CompareAdd: c.cmp, Swap: c.swap}); err != nil {
				t.Fatal(err)
			}
			diffWC(t, roce.WC{ID: uint64(60 + i), Status: qp.WCSuccess, Opcode: qp.WCCompSwap, ByteLen: 8, QPN: xq}, waitWC(t, x.scq))
			if got := ne.Uint64(x.buf[dstOff:]); got != c.wantOrig {
				t.Errorf("case %d: original value %#x, want %#x", i, got, c.wantOrig)
			}
			if got := ne.Uint64(y.buf[dstOff:]); got != c.wantMem {
				t.Errorf("case %d: memory %#x, want %#x", i, got, c.wantMem)
			}
		}
	})

	t.Run("ATOMIC_FETCH_AND_ADD", func(t *testing.T) {
		ne := binary.NativeEndian
		ne.PutUint64(y.buf[dstOff+8:], 1000)
		var sum uint64 = 1000
		for i := 0; i < 20; i++ {
			add := uint64(i*i + 1)
			if err := x.qp.PostSend(roce.SendWR{ID: uint64(70 + i), Opcode: qp.WRAtomicFetchAdd, Flags: qp.Signaled,
				SGL: []roce.SGE{x.sge(dstOff+64, 8)}, RemoteAddr: y.mr.Addr() + dstOff + 8, RKey: y.mr.RKey(),
				CompareAdd: add}); err != nil {
				t.Fatal(err)
			}
			diffWC(t, roce.WC{ID: uint64(70 + i), Status: qp.WCSuccess, Opcode: qp.WCFetchAdd, ByteLen: 8, QPN: xq}, waitWC(t, x.scq))
			if got := ne.Uint64(x.buf[dstOff+64:]); got != sum {
				t.Fatalf("fetch %d returned %d, want %d", i, got, sum)
			}
			sum += add
		}
		if got := ne.Uint64(y.buf[dstOff+8:]); got != sum {
			t.Fatalf("counter %d, want %d", got, sum)
		}
	})

	t.Run("unsignaled", func(t *testing.T) {
		fill(x.buf[:4000], 17)
		// Unsignaled WRITE then a signaled one: only the second completes.
		if err := x.qp.PostSend(roce.SendWR{ID: 81, Opcode: qp.WRRDMAWrite,
			SGL: []roce.SGE{x.sge(0, 2000)}, RemoteAddr: y.mr.Addr() + dstOff, RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 82, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(2000, 2000)}, RemoteAddr: y.mr.Addr() + dstOff + 2000, RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 82, Status: qp.WCSuccess, Opcode: qp.WCRDMAWrite, ByteLen: 2000, QPN: xq}, waitWC(t, x.scq))
		noWC(t, x.scq, 20*time.Millisecond)
		if !bytes.Equal(y.buf[dstOff:dstOff+4000], x.buf[:4000]) {
			t.Fatal("data differs")
		}
	})

	t.Run("SEND_WITH_INV", func(t *testing.T) {
		// What a peer's SEND with Invalidate withdraws in userspace verbs: a
		// type 2B window bound on the receiving queue pair.
		extra := make([]byte, 4096)
		m, err := y.pd.RegMR(extra, roce.LocalWrite|roce.RemoteWrite|roce.MWBind)
		if err != nil {
			t.Fatal(err)
		}
		w, err := y.pd.AllocMW(roce.MWType2B)
		if err != nil {
			t.Fatal(err)
		}
		k := roce.IncRKey(w.RKey())
		if err := y.qp.PostSend(roce.SendWR{ID: 90, Opcode: roce.WRBindMW, Flags: qp.Signaled, Bind: roce.BindWR{MW: w,
			RKey: k, Info: roce.BindInfo{MR: m, Addr: m.Addr(), Length: 4096, Access: roce.RemoteWrite}}}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 90, Status: qp.WCSuccess, Opcode: roce.WCBindMW, QPN: yq}, waitWC(t, y.scq))
		if err := y.qp.PostRecv(roce.RecvWR{ID: 91, SGL: []roce.SGE{y.sge(dstOff, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 92, Opcode: qp.WRSendInv, Flags: qp.Signaled, InvRKey: k,
			SGL: []roce.SGE{x.sge(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		diffWC(t, roce.WC{ID: 92, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: 64, QPN: xq}, waitWC(t, x.scq))
		diffWC(t, roce.WC{ID: 91, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: 64, ImmData: k,
			WithInv: true, QPN: yq, SrcQPN: xq}, waitWC(t, y.rcq))
		if w.Bound() {
			t.Error("the window is still bound after SEND_WITH_INV")
		}
		if err := w.Dealloc(); err != nil {
			t.Error(err)
		}
		if err := m.Deregister(); err != nil {
			t.Error(err)
		}
	})
}

func TestUDPipe(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	runUD(t, p)
}

func runUD(t *testing.T, p *devPair) {
	const qkey = 0x11223344
	x := newSide(t, p.a, roce.UD, connCfg{}, 0)
	y := newSide(t, p.b, roce.UD, connCfg{}, 0)
	for _, s := range []*side{x, y} {
		if err := s.qp.Activate(qkey, 0x100); err != nil {
			t.Fatal(err)
		}
	}
	gidB, _ := p.b.GID(1)
	ah, err := p.a.CreateAH(gidB, y.qp.QPN(), qkey)
	if err != nil {
		t.Fatal(err)
	}
	fill(x.buf[:500], 5)
	if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(dstOff, 2048)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSendAH(roce.SendWR{ID: 2, Opcode: qp.WRSendImm, Imm: 42, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(0, 500)}}, ah); err != nil {
		t.Fatal(err)
	}
	swc := waitWC(t, x.scq)
	want := roce.WC{ID: 2, Status: qp.WCSuccess, Opcode: qp.WCSend, ByteLen: 500, QPN: x.qp.QPN()}
	if swc.ByteLen == 0 { // byte_len of a send completion is undefined in ibverbs; rxe reports the length
		want.ByteLen = 0
	}
	if d := cmp.Diff(want, swc); d != "" {
		t.Errorf("send completion (-want +got):\n%s", d)
	}
	if d := cmp.Diff(roce.WC{ID: 1, Status: qp.WCSuccess, Opcode: qp.WCRecv, ByteLen: 540, ImmData: 42, WithImm: true,
		GRH: true, QPN: y.qp.QPN(), SrcQPN: x.qp.QPN()}, waitWC(t, y.rcq)); d != "" {
		t.Errorf("receive completion (-want +got):\n%s", d)
	}
	if !bytes.Equal(y.buf[dstOff+40:dstOff+540], x.buf[:500]) {
		t.Fatal("UD payload differs")
	}
	// The GRH area of an IPv4 packet holds the IPv4 header in its last 20
	// bytes: check the source address.
	src := roce.IPFromGID(p.a.GIDs()[1])
	if got := y.buf[dstOff+20+12 : dstOff+20+16]; !bytes.Equal(got, src.AsSlice()) {
		t.Errorf("GRH area does not name the sender %v: % x", src, y.buf[dstOff:dstOff+40])
	}

	// A wrong Q_Key is dropped silently.
	bad := *ah
	bad.QKey = qkey + 1
	if err := y.qp.PostRecv(roce.RecvWR{ID: 3, SGL: []roce.SGE{y.sge(dstOff, 2048)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSendAH(roce.SendWR{ID: 4, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 10)}}, &bad); err != nil {
		t.Fatal(err)
	}
	waitWC(t, x.scq) // UD sends complete locally
	noWC(t, y.rcq, 50*time.Millisecond)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
