package am_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xdproce/xdproce/am"
)

const (
	winID  = 3
	winLen = 64 << 10
	inline = 1024
)

var propCfg = am.Config{Inline: inline, Depth: 8, MaxRMA: 2}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randLen is an inline length (0..Inline) or an RMA one (Inline+1..20000),
// one time in two each.
func randLen(rng *rand.Rand) int {
	if rng.IntN(2) == 0 {
		return rng.IntN(inline + 1)
	}
	return inline + 1 + rng.IntN(20000-inline)
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// exposed returns a pair with window winID on b and a reference writer, both
// buffers holding the same random bytes.
func exposed(t *testing.T, rng *rand.Rand) (*pair, []byte, *refWriter) {
	p := newPair(t, propCfg)
	win := randBytes(rng, winLen)
	ref := append([]byte(nil), win...)
	if err := p.b.ep.Expose(winID, win); err != nil {
		t.Fatal(err)
	}
	return p, win, newRefWriter(t, p, ref)
}

// TestPropertyWritesAsRDMA: random (offset, length) AM writes, inline and
// RMA, one at a time, leave the window as RDMA WRITEs of the same data leave
// a reference buffer; random AM reads return the window's bytes.
func TestPropertyWritesAsRDMA(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 18))
	p, win, rw := exposed(t, rng)
	for i := range 120 {
		n := randLen(rng)
		off := rng.IntN(winLen - n + 1)
		data := randBytes(rng, n)
		h, err := p.a.ep.Write(winID, uint64(off), data)
		if err != nil {
			t.Fatal(err)
		}
		p.drive(t, h)
		if err := h.Err(); err != nil {
			t.Fatalf("write %d (off %d, len %d): %v", i, off, n, err)
		}
		rw.write(t, off, data)
		if d := firstDiff(win, rw.ref); d >= 0 {
			t.Fatalf("after write %d (off %d, len %d): window and reference differ at %d", i, off, n, d)
		}
		if i%3 == 0 {
			rn := randLen(rng)
			roff := rng.IntN(winLen - rn + 1)
			dst := make([]byte, rn)
			h, err := p.a.ep.Read(winID, uint64(roff), dst)
			if err != nil {
				t.Fatal(err)
			}
			p.drive(t, h)
			if err := h.Err(); err != nil || !bytes.Equal(dst, rw.ref[roff:roff+rn]) {
				t.Fatalf("read (off %d, len %d): %v, bytes equal %v", roff, rn, err, bytes.Equal(dst, rw.ref[roff:roff+rn]))
			}
		}
	}
	sa, sb := p.a.ep.Stats(), p.b.ep.Stats()
	if sa.TagRegistered == 0 || sb.RMAReads == 0 || sb.RMAWrites == 0 || sb.Handled != sa.RequestsSent || sb.NAKsSent != 0 {
		t.Errorf("stats: initiator %+v, target %+v", sa, sb)
	}
}

// TestPropertyQueuedWrites: many AM writes to disjoint ranges issued at once
// (more than Depth, several RMA ones more than MaxRMA) pass through the
// write and RMA queues and give the memory of the same RDMA WRITEs.
func TestPropertyQueuedWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 18))
	p, win, rw := exposed(t, rng)
	var hs []*am.Handle
	type w struct {
		off  int
		data []byte
	}
	var ws []w
	for off := 0; ; {
		n := randLen(rng)
		if off+n > winLen {
			break
		}
		ws = append(ws, w{off, randBytes(rng, n)})
		off += n + rng.IntN(64)
	}
	for _, x := range ws {
		h, err := p.a.ep.Write(winID, uint64(x.off), x.data)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	p.drive(t, hs...)
	for i, h := range hs {
		if err := h.Err(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for _, x := range ws {
		rw.write(t, x.off, x.data)
	}
	if d := firstDiff(win, rw.ref); d >= 0 {
		t.Fatalf("after %d queued writes: window and reference differ at %d", len(ws), d)
	}
	if s := p.b.ep.Stats(); len(ws) <= propCfg.Depth || s.RMAReads <= uint64(propCfg.MaxRMA) {
		t.Fatalf("%d writes (Depth %d), %d RMA reads (MaxRMA %d): the queues were not exercised",
			len(ws), propCfg.Depth, s.RMAReads, propCfg.MaxRMA)
	}
}

// TestNoProgressNoCompletion: without Progress calls nothing is sent; with
// the initiator's alone the requests travel but the target's handlers do not
// run: no Handle completes and the window does not change for 100 ms. Then
// both progress and everything completes.
func TestNoProgressNoCompletion(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 18))
	p, win, _ := exposed(t, rng)
	before := append([]byte(nil), win...)
	small, large := randBytes(rng, 100), randBytes(rng, 10000)
	dst := make([]byte, 5000)
	h1, _ := p.a.ep.Write(winID, 10, small)
	h2, _ := p.a.ep.Write(winID, 20000, large)
	h3, _ := p.a.ep.Read(winID, 40000, dst)
	hs := []*am.Handle{h1, h2, h3}
	tx := p.a.dev.Stats().TxFrames
	check := func(stage string) {
		t.Helper()
		for i, h := range hs {
			if h.Done() {
				t.Fatalf("%s: operation %d completed", stage, i)
			}
		}
		if !bytes.Equal(win, before) {
			t.Fatalf("%s: the window changed", stage)
		}
	}
	time.Sleep(100 * time.Millisecond)
	check("no progress")
	if got := p.a.dev.Stats().TxFrames; got != tx {
		t.Errorf("no progress: %d frames sent", got-tx)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if err := p.a.ep.Progress(); err != nil {
			t.Fatal(err)
		}
	}
	check("initiator progress only")
	if s := p.a.ep.Stats(); s.RequestsSent != 3 {
		t.Errorf("initiator sent %d requests, want 3", s.RequestsSent)
	}
	if s := p.b.ep.Stats(); s.Handled != 0 {
		t.Errorf("target handled %d requests without Progress", s.Handled)
	}
	p.drive(t, hs...)
	for i, h := range hs {
		if err := h.Err(); err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	if !bytes.Equal(win[10:110], small) || !bytes.Equal(win[20000:30000], large) || !bytes.Equal(dst, before[40000:45000]) {
		t.Fatal("after progress the data is not where it belongs")
	}
}

// TestOutOfRangeRefused: requests outside the window, or naming no window,
// are refused with AM_NAK and the window does not change.
func TestOutOfRangeRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 18))
	p, win, _ := exposed(t, rng)
	before := append([]byte(nil), win...)
	cases := []struct {
		read bool
		win  uint32
		off  uint64
		n    int
		want error
	}{
		{false, winID, winLen - 10, 11, am.ErrOutOfRange},
		{false, winID, winLen + 1, 0, am.ErrOutOfRange},
		{false, winID, 0, winLen + 1, am.ErrOutOfRange},
		{false, winID, 1 << 63, 5000, am.ErrOutOfRange},
		{false, winID, ^uint64(0), 1, am.ErrOutOfRange},
		{false, 99, 0, 10, am.ErrUnknownWindow},
		{false, 99, 0, 5000, am.ErrUnknownWindow},
		{true, winID, winLen - 100, 101, am.ErrOutOfRange},
		{true, winID, 1, winLen, am.ErrOutOfRange},
		{true, 98, 0, 10, am.ErrUnknownWindow},
	}
	for i, c := range cases {
		b := randBytes(rng, c.n)
		var h *am.Handle
		var err error
		if c.read {
			h, err = p.a.ep.Read(c.win, c.off, b)
		} else {
			h, err = p.a.ep.Write(c.win, c.off, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		p.drive(t, h)
		if err := h.Err(); !errors.Is(err, c.want) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
		if !bytes.Equal(win, before) {
			t.Fatalf("case %d: the window changed", i)
		}
	}
	if s := p.b.ep.Stats(); s.NAKsSent != uint64(len(cases)) || s.RMAReads != 0 || s.RMAWrites != 0 {
		t.Errorf("target stats %+v", s)
	}
	// The endpoint still works.
	h, _ := p.a.ep.Write(winID, 0, []byte("ok"))
	p.drive(t, h)
	if h.Err() != nil || string(win[:2]) != "ok" {
		t.Errorf("write after refusals: %v", h.Err())
	}
}
