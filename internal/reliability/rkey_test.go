package reliability

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

var (
	ipA = netip.MustParseAddr("198.51.100.1")
	ipB = netip.MustParseAddr("198.51.100.2")
)

// newPipePair returns devices a (198.51.100.1) and b (.2) over a pipe with
// cfg, closed when the test ends. b's first QPN is taken so that the two
// ends of a connection never share a QPN.
func newPipePair(tb testing.TB, cfg pipe.Config) (a, b *roce.Device, la, lb *pipe.Link) {
	tb.Helper()
	la, lb, err := pipe.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	a, b = newDevicePair(tb, la, lb, ipA, ipB)
	return a, b, la, lb
}

func newDevicePair(tb testing.TB, la, lb link.Link, ia, ib netip.Addr) (a, b *roce.Device) {
	tb.Helper()
	var err error
	if a, err = roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{ia}}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	if b, err = roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{ib}}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	cq, err := b.CreateCQ(1)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := b.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}); err != nil {
		tb.Fatal(err)
	}
	return a, b
}

// rcPair is one RC connection: x on one device, y on the other.
type rcPair struct {
	x, y     *roce.QP
	xcq, ycq *roce.CQ
}

// connectPair creates and connects an RC queue pair on pdX and one on pdY.
// cq == nil makes a CQ per queue pair.
func connectPair(tb testing.TB, pdX, pdY *roce.PD, xcq, ycq *roce.CQ, maxWR int, o *roce.ConnectOptions) rcPair {
	tb.Helper()
	var err error
	if xcq == nil {
		if xcq, err = pdX.Device().CreateCQ(2 * maxWR); err != nil {
			tb.Fatal(err)
		}
	}
	if ycq == nil {
		if ycq, err = pdY.Device().CreateCQ(2 * maxWR); err != nil {
			tb.Fatal(err)
		}
	}
	x, err := pdX.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: xcq, RecvCQ: xcq, MaxSendWR: maxWR, MaxRecvWR: maxWR})
	if err != nil {
		tb.Fatal(err)
	}
	y, err := pdY.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: ycq, RecvCQ: ycq, MaxSendWR: maxWR, MaxRecvWR: maxWR})
	if err != nil {
		tb.Fatal(err)
	}
	gx, _ := pdX.Device().GID(1)
	gy, _ := pdY.Device().GID(1)
	psnX, psnY := rand.Uint32()&0xFFFFFF, rand.Uint32()&0xFFFFFF
	if err := x.Connect(psnX, roce.Endpoint{QPN: y.QPN(), PSN: psnY, GID: gy}, o); err != nil {
		tb.Fatal(err)
	}
	if err := y.Connect(psnY, roce.Endpoint{QPN: x.QPN(), PSN: psnX, GID: gx}, o); err != nil {
		tb.Fatal(err)
	}
	return rcPair{x: x, y: y, xcq: xcq, ycq: ycq}
}

// wait1 waits (at most d) for one completion on cq.
func wait1(tb testing.TB, cq *roce.CQ, d time.Duration) roce.WC {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]roce.WC
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		tb.Fatalf("no completion within %v (n=%d, %v)", d, n, err)
	}
	return wc[0]
}

func sgeOf(m *roce.MR, off, n int) []roce.SGE {
	return []roce.SGE{{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}}
}

// TestRKeyGuessing: an attacker makes 10,000 R_Key guesses (WRITE and READ,
// at the real addresses of the victim's regions): uniformly random keys,
// neighbours and one-bit flips of the key it was granted, the victim's L_Keys
// and a deregistered region's key. Each guess runs on a freshly connected
// queue pair (the remote access NAK moves both ends to ERROR). No guess
// completes successfully, no victim byte changes, no READ returns data, the
// honest connection keeps working throughout, and the deregistered key never
// works again, not even after new registrations.
func TestRKeyGuessing(t *testing.T) {
	guesses := 10000
	if testing.Short() {
		guesses = 1000
	}
	att, vic, _, _ := newPipePair(t, pipe.Config{TxBuffers: 1024})
	pdA, pdV := att.AllocPD(), vic.AllocPD()
	rng := rand.New(rand.NewPCG(1, 2))

	// The victim's regions, all in the PD the attacker's queue pairs use.
	all := roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic
	var vmem [][]byte
	var vmrs []*roce.MR
	for i := range 16 {
		b := make([]byte, 4096)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		acc := all
		if i%4 == 3 {
			acc = roce.RemoteRead
		}
		m, err := pdV.RegMR(b, acc)
		if err != nil {
			t.Fatal(err)
		}
		vmem, vmrs = append(vmem, b), append(vmrs, m)
	}
	snap := make([][]byte, len(vmem))
	for i, b := range vmem {
		snap[i] = append([]byte(nil), b...)
	}
	// The region granted to the attacker (and used by the honest
	// connection), and one granted then deregistered.
	granted := make([]byte, 4096)
	gmr, err := pdV.RegMR(granted, all)
	if err != nil {
		t.Fatal(err)
	}
	oldBuf := make([]byte, 4096)
	old, err := pdV.RegMR(oldBuf, all)
	if err != nil {
		t.Fatal(err)
	}
	valid := map[uint32]bool{gmr.RKey(): true, old.RKey(): true}
	for _, m := range vmrs {
		valid[m.RKey()] = true
	}

	// Attacker memory: WRITE source and READ destination.
	abuf := make([]byte, 8192)
	for i := range abuf {
		abuf[i] = 0xEE
	}
	amr, err := pdA.RegMR(abuf, roce.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	o := roce.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = 10, 3

	// The honest connection and the deregistered key, before the attack: a
	// WRITE with the old key works while it is registered.
	honest := connectPair(t, pdA, pdV, nil, nil, 16, &o)
	honestRound := func(seq int) {
		t.Helper()
		for i := range 64 {
			abuf[4096+i] = byte(seq + i)
		}
		if err := honest.x.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: sgeOf(amr, 4096, 64), RemoteAddr: gmr.Addr() + uint64(seq%64)*64, RKey: gmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := wait1(t, honest.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
			t.Fatalf("honest WRITE after %d guesses: %v", seq, wc.Status)
		}
		if !bytes.Equal(granted[(seq%64)*64:][:64], abuf[4096:4096+64]) {
			t.Fatalf("honest WRITE after %d guesses did not land", seq)
		}
		if err := honest.x.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
			SGL: sgeOf(amr, 4096+64, 64), RemoteAddr: gmr.Addr() + uint64(seq%64)*64, RKey: gmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := wait1(t, honest.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
			t.Fatalf("honest READ after %d guesses: %v", seq, wc.Status)
		}
		if !bytes.Equal(abuf[4096+64:4096+128], abuf[4096:4096+64]) {
			t.Fatalf("honest READ after %d guesses returned other bytes", seq)
		}
		for i := 4096 + 64; i < 4096+128; i++ {
			abuf[i] = 0xEE
		}
	}
	honestRound(0)
	if err := honest.x.PostSend(roce.SendWR{ID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: sgeOf(amr, 4096, 64), RemoteAddr: old.Addr(), RKey: old.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, honest.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
		t.Fatalf("WRITE with the key before deregistration: %v", wc.Status)
	}
	oldKey, oldAddr := old.RKey(), old.Addr()
	if err := old.Deregister(); err != nil {
		t.Fatal(err)
	}
	oldSnap := append([]byte(nil), oldBuf...)

	// Retired queue pairs are destroyed in the background (Destroy waits for
	// the engine).
	retire := make(chan *roce.QP, 256)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range retire {
				if err := q.Destroy(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	defer func() { close(retire); wg.Wait() }()

	kinds := map[string]int{}
	var statuses = map[qp.WCStatus]int{}
	start := time.Now()
	for g := 0; g < guesses; g++ {
		var key uint32
		var kind string
		switch r := rng.IntN(100); {
		case r < 60:
			key, kind = rng.Uint32(), "random"
		case r < 75:
			d := 1 + rng.IntN(256) // ±1..256, never the granted key itself
			if rng.IntN(2) == 0 {
				d = -d
			}
			key, kind = gmr.RKey()+uint32(d), "neighbour"
		case r < 85:
			key, kind = gmr.RKey()^1<<rng.IntN(32), "bit flip"
		case r < 95:
			key, kind = vmrs[rng.IntN(len(vmrs))].LKey(), "lkey"
		default:
			key, kind = oldKey, "deregistered"
		}
		if key != oldKey && valid[key] {
			kind = "hit a live key (skipped)"
			kinds[kind]++
			continue
		}
		kinds[kind]++
		target := rng.IntN(len(vmrs))
		va := vmrs[target].Addr() + uint64(rng.IntN(4096-64))
		if kind == "deregistered" {
			va = oldAddr + uint64(rng.IntN(4096-64))
		}
		c := connectPair(t, pdA, pdV, nil, nil, 2, &o)
		op := qp.WRRDMAWrite
		sge := sgeOf(amr, 0, 64)
		if g%2 == 1 {
			op, sge = qp.WRRDMARead, sgeOf(amr, 64, 64)
		}
		if err := c.x.PostSend(roce.SendWR{ID: uint64(g), Opcode: op, Flags: qp.Signaled, SGL: sge, RemoteAddr: va, RKey: key}); err != nil {
			t.Fatal(err)
		}
		wc := wait1(t, c.xcq, 5*time.Second)
		statuses[wc.Status]++
		if wc.Status != qp.WCRemAccessErr {
			t.Fatalf("guess %d (%s key %#x, %v at %#x) completed with %v, want %v", g, kind, key, op, va, wc.Status, qp.WCRemAccessErr)
		}
		if st := c.x.State(); st != qp.Error {
			t.Fatalf("guess %d: attacker queue pair in %v after the NAK, want ERROR", g, st)
		}
		if g%97 == 0 { // the victim's end moves to ERROR too (checked on a sample: it needs the engine)
			deadline := time.Now().Add(2 * time.Second)
			for c.y.State() != qp.Error && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if st := c.y.State(); st != qp.Error {
				t.Fatalf("guess %d: victim queue pair in %v after sending a remote access NAK", g, st)
			}
		}
		retire <- c.x
		retire <- c.y
		if g%1000 == 999 {
			honestRound(g)
			checkUnchanged(t, g, vmem, snap, oldBuf, oldSnap, abuf)
			// New registrations never bring the old key back.
			b := make([]byte, 64)
			m, err := pdV.RegMR(b, all)
			if err != nil {
				t.Fatal(err)
			}
			if m.RKey() == oldKey || m.LKey() == oldKey {
				t.Fatalf("a new region got the deregistered key %#x", oldKey)
			}
			valid[m.RKey()] = true
		}
	}
	el := time.Since(start)
	honestRound(guesses)
	checkUnchanged(t, guesses, vmem, snap, oldBuf, oldSnap, abuf)
	t.Logf("%d guesses in %v (%v each); kinds %v; completions %v", guesses, el.Round(time.Millisecond),
		(el / time.Duration(guesses)).Round(time.Microsecond), kinds, statuses)
	t.Logf("victim %+v", vic.Stats())
	if statuses[qp.WCRemAccessErr] == 0 || kinds["deregistered"] == 0 {
		t.Errorf("no remote access errors or no deregistered-key guesses: %v %v", statuses, kinds)
	}
}

// checkUnchanged fails unless the victim's regions, the deregistered
// region's buffer and the attacker's READ destination are as before.
func checkUnchanged(t *testing.T, g int, vmem, snap [][]byte, oldBuf, oldSnap, abuf []byte) {
	t.Helper()
	for i := range vmem {
		if !bytes.Equal(vmem[i], snap[i]) {
			t.Fatalf("after %d guesses: victim region %d changed", g, i)
		}
	}
	if !bytes.Equal(oldBuf, oldSnap) {
		t.Fatalf("after %d guesses: the deregistered region's memory changed", g)
	}
	for i := 64; i < 128; i++ {
		if abuf[i] != 0xEE {
			t.Fatalf("after %d guesses: a READ guess brought data back (byte %d)", g, i)
		}
	}
}
