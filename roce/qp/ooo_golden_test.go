package qp

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

var updateOOO = flag.Bool("update", false, "regenerate the OOO and SR golden captures in testdata/pcaps")

const pcapDir = "../../testdata/pcaps"

// oooPair is two connected OOO queue pairs of the in-test network (keys,
// contexts and clock deterministic), with a 64 KiB region each and 4
// contexts each.
type oooPair struct {
	*pair
	ma, mb     *mr.MR
	bufA, bufB []byte
	ca, cb     []wire.Ctx
}

func newOOOPair(tb testing.TB) *oooPair {
	tb.Helper()
	o := defaultOpts()
	o.typ, o.txBufs = OOO, 64
	p := &oooPair{pair: newPair(tb, o)}
	// Fixed IOVAs: the captures hold them.
	p.bufA, p.bufB = make([]byte, 64<<10), make([]byte, 64<<10)
	var err error
	if p.ma, err = p.a.pd.RegisterIOVA(p.bufA, 0x7f00_1000_0000, allAcc); err != nil {
		tb.Fatal(err)
	}
	if p.mb, err = p.b.pd.RegisterIOVA(p.bufB, 0x7f00_2000_0000, allAcc); err != nil {
		tb.Fatal(err)
	}
	if p.ca, err = p.a.q.AcquireContexts(4); err != nil {
		tb.Fatal(err)
	}
	if p.cb, err = p.b.q.AcquireContexts(4); err != nil {
		tb.Fatal(err)
	}
	return p
}

// sent runs e's Progress and returns copies of the frames it sent.
func sent(e *end, now int64) [][]byte {
	e.q.Progress(now, e.out)
	return takeCommitted(e)
}

func takeCommitted(e *end) [][]byte {
	var out [][]byte
	for _, f := range e.out.committed {
		out = append(out, bytes.Clone(f))
	}
	clear(e.out.committed)
	e.out.committed = e.out.committed[:0]
	e.out.free = len(e.out.pool)
	return out
}

// hand gives frames to e's queue pair in the order given and returns what
// it sent meanwhile (completions go out from Receive).
func hand(tb testing.TB, e *end, now int64, frames ...[]byte) [][]byte {
	tb.Helper()
	for _, f := range frames {
		if err := e.pkt.DecodeWith(f, wire.AcceptOOO|wire.AcceptSR); err != nil {
			tb.Fatal(err)
		}
		e.q.Receive(&e.pkt, now, e.out)
	}
	return append(takeCommitted(e), sent(e, now)...)
}

// capRec records the frames one host's interface saw.
type capRec struct {
	name   string
	frames [][]byte
	dirs   []capture.Direction
}

func (c *capRec) add(dir capture.Direction, frames ...[]byte) {
	for _, f := range frames {
		c.frames = append(c.frames, f)
		c.dirs = append(c.dirs, dir)
	}
}

// check writes the capture as pcapng with fixed timestamps, checks that
// every frame describes cleanly (what dump --verify checks) and compares it
// and its dump text with testdata/pcaps/NAME.pcapng and NAME.txt (-update
// writes them).
func (c *capRec) check(t *testing.T, ifc string) {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, nil)
	must(t, err)
	id, err := w.AddInterface(capture.Interface{Name: ifc, Description: "xdproce golden capture: " + c.name})
	must(t, err)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, f := range c.frames {
		must(t, w.WritePacket(id, base.Add(time.Duration(i)*10*time.Microsecond), c.dirs[i], f))
	}
	must(t, w.Flush())
	r, err := capture.NewReader(bytes.NewReader(buf.Bytes()))
	must(t, err)
	var text strings.Builder
	var f capture.Frame
	for {
		if err := r.Next(&f); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rec := capture.Describe(&f)
		if rec.Bad() || strings.HasPrefix(c.name, "ooo-") && rec.OOO == nil || strings.HasPrefix(c.name, "sr-") && rec.BTH == nil {
			t.Errorf("%s: frame %s", c.name, rec)
		}
		text.WriteString(rec.String())
		text.WriteByte('\n')
	}
	for ext, data := range map[string][]byte{".pcapng": buf.Bytes(), ".txt": []byte(text.String())} {
		path := filepath.Join(pcapDir, c.name+ext)
		if *updateOOO {
			must(t, os.WriteFile(path, data, 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./roce/qp -run 'GoldenOOO|GoldenSR' -update writes it)", err)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("%s differs from what the engine sends now; if intended, go test ./roce/qp -run 'GoldenOOO|GoldenSR' -update\n%s", path, text.String())
		}
	}
}

// TestGoldenOOO builds the OOO golden captures from what the engines send
// (keys from fixed seeds) and compares them byte for byte:
//   - ooo-write-shuffled: B's view of a 4-packet WRITE arriving in the order
//     2, 0, 3, 0 (duplicate), 1, and B's completion to A;
//   - ooo-read: A's view of a READ request, B's 3 response packets and A's
//     completion to B;
//   - ooo-stale-tid: B's view of tid 2 placed and completed, then a tid 1
//     packet with other bytes and a duplicate of tid 2, both dropped;
//   - ooo-completion: A's view of a WRITE asking for a completion (it
//     comes), then one asking for none (none comes).
func TestGoldenOOO(t *testing.T) {
	t.Run("write-shuffled", func(t *testing.T) {
		p := newOOOPair(t)
		fill(p.bufA[:3500], 1)
		must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, 0, 3500)},
			RemoteAddr: p.mb.Addr() + 256, RKey: p.mb.RKey(), Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: 1,
			Notify: wire.NotifyBoth, Tag: 0xC0FFEE}))
		w := sent(p.a, p.now)
		if len(w) != 4 {
			t.Fatalf("%d frames for a 4-packet WRITE", len(w))
		}
		c := &capRec{name: "ooo-write-shuffled"}
		order := [][]byte{w[2], w[0], w[3], w[0], w[1]}
		var back [][]byte
		for _, f := range order {
			c.add(capture.DirInbound, f)
			out := hand(t, p.b, p.now, f)
			c.add(capture.DirOutbound, out...)
			back = append(back, out...)
		}
		if len(back) != 1 || !bytes.Equal(p.bufB[256:256+3500], p.bufA[:3500]) {
			t.Fatalf("%d frames back; data equal %v", len(back), bytes.Equal(p.bufB[256:256+3500], p.bufA[:3500]))
		}
		c.check(t, "veth-b")
	})
	t.Run("read", func(t *testing.T) {
		p := newOOOPair(t)
		fill(p.bufB[:3000], 2)
		must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WROOORead, SGL: []mr.SGE{sge(p.ma, 1024, 3000)}, SinkRKey: p.ma.RKey(),
			RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(), Ctx: p.ca[1], RemoteCtx: p.cb[1], TID: 9, Notify: wire.NotifyBoth, Tag: 7}))
		c := &capRec{name: "ooo-read"}
		req := sent(p.a, p.now)
		c.add(capture.DirOutbound, req...)
		resp := hand(t, p.b, p.now, req...)
		if len(resp) != 3 {
			t.Fatalf("%d response frames, want 3", len(resp))
		}
		c.add(capture.DirInbound, resp...)
		cpl := hand(t, p.a, p.now, resp...)
		c.add(capture.DirOutbound, cpl...)
		if len(cpl) != 1 || !bytes.Equal(p.bufA[1024:4024], p.bufB[:3000]) {
			t.Fatalf("%d completions; data equal %v", len(cpl), bytes.Equal(p.bufA[1024:4024], p.bufB[:3000]))
		}
		if back := hand(t, p.b, p.now, cpl...); len(back) != 0 {
			t.Fatalf("the source answered the completion with %d frames", len(back))
		}
		c.check(t, "veth-a")
	})
	t.Run("stale-tid", func(t *testing.T) {
		p := newOOOPair(t)
		fill(p.bufA[:2048], 3)
		post := func(tid uint32, off int) [][]byte {
			must(t, p.a.q.PostSend(&SendWR{ID: uint64(tid), Opcode: WROOOWrite, SGL: []mr.SGE{sge(p.ma, off, 2048)},
				RemoteAddr: p.mb.Addr(), RKey: p.mb.RKey(), Ctx: p.ca[2], RemoteCtx: p.cb[2], TID: tid,
				Notify: wire.NotifyInitiator, Tag: tid}))
			return sent(p.a, p.now)
		}
		c := &capRec{name: "ooo-stale-tid"}
		two := post(2, 0)
		fill(p.bufA[4096:6144], 0xEE)
		one := post(1, 4096) // an older tid with other bytes
		for _, f := range two {
			c.add(capture.DirInbound, f)
			c.add(capture.DirOutbound, hand(t, p.b, p.now, f)...)
		}
		c.add(capture.DirInbound, one[1], two[0])
		if out := hand(t, p.b, p.now, one[1], two[0]); len(out) != 0 {
			t.Fatalf("stale and duplicate packets answered with %d frames", len(out))
		}
		if !bytes.Equal(p.bufB[:2048], p.bufA[:2048]) {
			t.Fatal("the stale packet changed memory")
		}
		if s := p.b.q.Stats(); s.Get(CtrStaleTID) != 1 || s.Get(CtrDupIndex) != 1 {
			t.Fatalf("stale_tid %d, dup_index %d", s.Get(CtrStaleTID), s.Get(CtrDupIndex))
		}
		c.check(t, "veth-b")
	})
	t.Run("completion", func(t *testing.T) {
		p := newOOOPair(t)
		fill(p.bufA[:100], 4)
		c := &capRec{name: "ooo-completion"}
		for i, n := range []wire.Notify{wire.NotifyInitiator, wire.NotifyNone} {
			must(t, p.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WROOOWrite, Flags: Signaled, SGL: []mr.SGE{sge(p.ma, 0, 100)},
				RemoteAddr: p.mb.Addr() + 8, RKey: p.mb.RKey(), Ctx: p.ca[3], RemoteCtx: p.cb[3], TID: uint32(i + 1),
				Notify: n, Tag: 0x5EED0000 + uint32(i)}))
			w := sent(p.a, p.now)
			c.add(capture.DirOutbound, w...)
			back := hand(t, p.b, p.now, w...)
			c.add(capture.DirInbound, back...)
			if want := 1 - i; len(back) != want {
				t.Fatalf("notify %v: %d completion frames, want %d", n, len(back), want)
			}
			hand(t, p.a, p.now, back...)
		}
		wcs := make([]WC, 8)
		k, _ := p.a.cq.Poll(wcs)
		// Local completions of both, the delivered one of the first only.
		if k != 3 || wcs[0].Opcode != WCOOOWrite || wcs[1].Opcode != WCOOODelivered || wcs[1].TID != 1 ||
			wcs[1].Tag != 0x5EED0000 || wcs[2].Opcode != WCOOOWrite || wcs[2].TID != 2 {
			t.Fatalf("initiator completions %+v", wcs[:k])
		}
		c.check(t, "veth-a")
	})
}
