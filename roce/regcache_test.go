package roce_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// fakeClock is a RegCache clock the test moves by hand.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Duration      { return time.Duration(c.t.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.t.Add(int64(d)) }

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// newCache returns a cache on a fresh PD of a pipe device, on a fake clock.
func newCache(t *testing.T, cfg roce.RegCacheConfig) (*roce.RegCache, *roce.PD, *fakeClock) {
	t.Helper()
	p, _, _ := newPipeDevices(t, pipe.Config{})
	pd := p.a.AllocPD()
	clk := &fakeClock{}
	c, err := roce.NewRegCacheClock(pd, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	return c, pd, clk
}

func mustGet(t *testing.T, c *roce.RegCache, buf []byte) (*roce.MR, func()) {
	t.Helper()
	m, release, err := c.Get(buf)
	if err != nil {
		t.Fatalf("get %d bytes at %#x: %v", len(buf), addrOf(buf), err)
	}
	if a := addrOf(buf); a < m.Addr() || a+uint64(len(buf)) > m.Addr()+uint64(m.Len()) {
		t.Fatalf("region [%#x, +%d) does not contain the buffer [%#x, +%d)", m.Addr(), m.Len(), a, len(buf))
	}
	return m, release
}

// checkRegistered checks whether m's keys are still in the device's table.
func checkRegistered(t *testing.T, c *roce.RegCache, m *roce.MR, want bool, what string) {
	t.Helper()
	if got := c.Registered(m); got != want {
		t.Fatalf("%s: registered = %v, want %v", what, got, want)
	}
}

func checkStats(t *testing.T, c *roce.RegCache, want roce.RegCacheStats) {
	t.Helper()
	if got := c.Stats(); got != want {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
}

func TestRegCacheHitsAndMisses(t *testing.T) {
	c, _, _ := newCache(t, roce.RegCacheConfig{})
	buf := make([]byte, 64<<10)
	m1, rel := mustGet(t, c, buf)
	rel()
	m2, rel := mustGet(t, c, buf)
	rel()
	if m2 != m1 {
		t.Fatalf("same buffer: region %p (rkey %#x), want the cached %p", m2, m2.RKey(), m1)
	}
	checkStats(t, c, roce.RegCacheStats{Hits: 1, Misses: 1, Entries: 1, Bytes: 64 << 10})

	// Another buffer of the same length is another region.
	other := make([]byte, 64<<10)
	m3, rel := mustGet(t, c, other)
	rel()
	if m3 == m1 || m3.Addr() != addrOf(other) || m3.RKey() == m1.RKey() {
		t.Fatalf("other buffer of the same length: region at %#x rkey %#x, first at %#x rkey %#x",
			m3.Addr(), m3.RKey(), m1.Addr(), m1.RKey())
	}

	// A sub-slice hits the region containing it, even across a fragment
	// boundary of the index.
	for _, sub := range [][]byte{buf[100:300], buf[60<<10:], buf[:1], buf[len(buf)-1:]} {
		m, rel := mustGet(t, c, sub)
		rel()
		if m != m1 {
			t.Fatalf("sub-slice at offset %d: region at %#x, want the buffer's at %#x", addrOf(sub)-addrOf(buf), m.Addr(), m1.Addr())
		}
	}
	checkStats(t, c, roce.RegCacheStats{Hits: 5, Misses: 2, Entries: 2, Bytes: 128 << 10})

	// A slice that starts in the region but ends past it (the same backing
	// array, longer) is not contained: a new region.
	long := make([]byte, 128<<10)
	short, rel := mustGet(t, c, long[:32<<10])
	rel()
	whole, rel := mustGet(t, c, long)
	rel()
	if whole == short || whole.Len() != len(long) {
		t.Fatalf("longer slice of a registered buffer: region of %d bytes, want a new one of %d", whole.Len(), len(long))
	}

	// A buffer reallocated at a new address (append past its capacity)
	// misses: it must not reach the old registration.
	grown := append(buf, 1)
	mg, rel := mustGet(t, c, grown)
	rel()
	if mg == m1 || mg.Addr() != addrOf(grown) || mg.Len() != len(grown) {
		t.Fatalf("reallocated buffer: region at %#x len %d, want a new one at %#x len %d", mg.Addr(), mg.Len(), addrOf(grown), len(grown))
	}
	checkStats(t, c, roce.RegCacheStats{Hits: 5, Misses: 5, Entries: 5, Bytes: (64+64+32+128)<<10 + int64(len(grown))})
	if _, _, err := c.Get(nil); err == nil {
		t.Fatal("Get(nil) succeeded")
	}
}

func TestRegCacheIdleEviction(t *testing.T) {
	c, _, clk := newCache(t, roce.RegCacheConfig{Idle: 5 * time.Second})
	a, b := make([]byte, 4096), make([]byte, 4096)
	ma, rel := mustGet(t, c, a)
	rel()
	clk.advance(3 * time.Second)
	mb, rel := mustGet(t, c, b)
	rel()
	clk.advance(2*time.Second - 1)
	c.Sweep()
	checkRegistered(t, c, ma, true, "a, idle 5 s - 1 ns")
	clk.advance(1)
	c.Sweep()
	checkRegistered(t, c, ma, false, "a, idle 5 s")
	checkRegistered(t, c, mb, true, "b, idle 2 s")
	checkStats(t, c, roce.RegCacheStats{Misses: 2, Expired: 1, Entries: 1, Bytes: 4096})

	// A hit restarts the idle time.
	clk.advance(2 * time.Second) // b idle 4 s
	if m, rel := mustGet(t, c, b); m != mb {
		t.Fatal("b: miss")
	} else {
		rel()
	}
	clk.advance(4 * time.Second)
	c.Sweep()
	checkRegistered(t, c, mb, true, "b, used 4 s ago")

	// An expired region is found by Get itself, without Sweep, and the
	// buffer is registered anew.
	clk.advance(time.Second)
	m, rel := mustGet(t, c, b)
	defer rel()
	if m == mb || c.Registered(mb) {
		t.Fatal("b after expiry: old region reused or still registered")
	}
	checkStats(t, c, roce.RegCacheStats{Hits: 1, Misses: 3, Expired: 2, Entries: 1, Bytes: 4096, InUse: 1})
}

func TestRegCacheInUseNeverEvicted(t *testing.T) {
	c, _, clk := newCache(t, roce.RegCacheConfig{Idle: time.Second, MaxEntries: 2})
	a, b, x := make([]byte, 100), make([]byte, 100), make([]byte, 100)
	ma, relA := mustGet(t, c, a)
	mb, relB := mustGet(t, c, b)
	clk.advance(time.Hour)
	c.Sweep()
	checkRegistered(t, c, ma, true, "a in use an hour")
	// Full of regions in use: no room, and nothing deregistered.
	if _, _, err := c.Get(x); !errors.Is(err, roce.ErrLimit) {
		t.Fatalf("get with every region in use: %v, want ErrLimit", err)
	}
	checkRegistered(t, c, mb, true, "b in use, cache full")
	// A second Get of a (in use) shares its region; one release keeps it.
	ma2, relA2 := mustGet(t, c, a)
	if ma2 != ma {
		t.Fatal("a in use: second Get registered again")
	}
	relA()
	relA() // a second call of the same release does nothing
	clk.advance(time.Hour)
	c.Sweep()
	checkRegistered(t, c, ma, true, "a, one of two uses released")
	checkStats(t, c, roce.RegCacheStats{Hits: 1, Misses: 3, Entries: 2, Bytes: 200, InUse: 2})
	relA2()
	// Now a is idle: making room for x evicts it, never b.
	mx, relX := mustGet(t, c, x)
	checkRegistered(t, c, ma, false, "a idle, evicted for x")
	checkRegistered(t, c, mb, true, "b in use")
	checkStats(t, c, roce.RegCacheStats{Hits: 1, Misses: 4, Evicted: 1, Entries: 2, Bytes: 200, InUse: 2})
	relB()
	relX()
	checkRegistered(t, c, mx, true, "x just released")
}

func TestRegCacheBoundsLRU(t *testing.T) {
	c, _, clk := newCache(t, roce.RegCacheConfig{Idle: time.Hour, MaxEntries: 3, MaxBytes: 1000})
	bufs := [][]byte{make([]byte, 300), make([]byte, 300), make([]byte, 300), make([]byte, 300)}
	ms := make([]*roce.MR, 3)
	for i := range 3 {
		var rel func()
		ms[i], rel = mustGet(t, c, bufs[i])
		rel()
		clk.advance(time.Second)
	}
	// Using 0 again makes 1 the least recently released.
	_, rel := mustGet(t, c, bufs[0])
	rel()
	mustGet(t, c, bufs[3])
	checkRegistered(t, c, ms[1], false, "least recently released")
	checkRegistered(t, c, ms[0], true, "recently used")
	checkRegistered(t, c, ms[2], true, "released after 1")
	// MaxBytes: 700 more bytes need two of the three 300-byte regions gone;
	// bufs[3] is in use, so 2 then 0 go.
	mustGet(t, c, make([]byte, 700))
	checkRegistered(t, c, ms[2], false, "evicted for bytes")
	checkRegistered(t, c, ms[0], false, "evicted for bytes")
	checkStats(t, c, roce.RegCacheStats{Hits: 1, Misses: 5, Evicted: 3, Entries: 2, Bytes: 1000, InUse: 2})
	if _, _, err := c.Get(make([]byte, 1001)); !errors.Is(err, roce.ErrLimit) {
		t.Fatalf("buffer larger than MaxBytes: %v, want ErrLimit", err)
	}
}

func TestRegCacheDeregisteredBehindItsBack(t *testing.T) {
	c, _, _ := newCache(t, roce.RegCacheConfig{})
	buf := make([]byte, 512)
	m, rel := mustGet(t, c, buf)
	rel()
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	m2, rel := mustGet(t, c, buf)
	defer rel()
	if m2 == m || !c.Registered(m2) {
		t.Fatal("a region deregistered by the caller was handed out again")
	}
	checkStats(t, c, roce.RegCacheStats{Misses: 2, Stale: 1, Entries: 1, Bytes: 512, InUse: 1})
}

func TestRegCacheClose(t *testing.T) {
	c, pd, _ := newCache(t, roce.RegCacheConfig{})
	busy, idle := make([]byte, 100), make([]byte, 100)
	mb, relBusy := mustGet(t, c, busy)
	mi, rel := mustGet(t, c, idle)
	rel()
	if err := c.Close(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("close with a region in use: %v, want ErrBusy", err)
	}
	checkRegistered(t, c, mi, false, "idle region after Close")
	checkRegistered(t, c, mb, true, "region in use after Close")
	if _, _, err := c.Get(idle); !errors.Is(err, roce.ErrClosed) {
		t.Fatalf("get after close: %v, want ErrClosed", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("dealloc pd with a region in use: %v, want ErrBusy", err)
	}
	relBusy()
	checkRegistered(t, c, mb, false, "region released after Close")
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("dealloc pd after the cache let everything go: %v", err)
	}
}

// TestRegCacheTimer checks that idle regions are deregistered when nobody
// calls the cache (the real clock and timer).
func TestRegCacheTimer(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	c, err := p.a.AllocPD().RegCache(roce.RegCacheConfig{Idle: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, rel := mustGet(t, c, make([]byte, 100))
	rel()
	deadline := time.Now().Add(5 * time.Second)
	for c.Registered(m) {
		if time.Now().After(deadline) {
			t.Fatalf("region still registered 5 s after release with Idle 20 ms: %+v", c.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := c.Stats(); st.Expired != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRegCacheKeepsBufferAlive checks the premise of the cache's validation:
// while a region is cached, its memory cannot be collected (so not reused at
// the same address for another buffer); once evicted, it can.
func TestRegCacheKeepsBufferAlive(t *testing.T) {
	c, _, clk := newCache(t, roce.RegCacheConfig{Idle: time.Second})
	freed := make(chan struct{})
	func() {
		buf := make([]byte, 1<<16)
		runtime.AddCleanup(&buf[0], func(ch chan struct{}) { close(ch) }, freed)
		_, rel := mustGet(t, c, buf)
		rel()
	}()
	for range 3 {
		runtime.GC()
	}
	select {
	case <-freed:
		t.Fatal("a cached buffer was collected")
	case <-time.After(50 * time.Millisecond):
	}
	clk.advance(time.Second)
	c.Sweep()
	deadline := time.After(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-deadline:
			t.Fatal("an evicted buffer was not collected within 5 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestRegCacheConcurrent(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	pd := p.a.AllocPD()
	c, err := pd.RegCache(roce.RegCacheConfig{Idle: time.Millisecond, MaxEntries: 6, Fragment: 4096})
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, 10)
	for i := range bufs {
		bufs[i] = make([]byte, 8192+i*1000)
	}
	const workers, iters = 6, 1500
	var gets, limits atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range iters {
				b := bufs[r.IntN(len(bufs))]
				if r.IntN(2) == 0 { // a sub-slice, else the whole buffer
					lo := r.IntN(len(b) / 2)
					b = b[lo : lo+1+r.IntN(len(b)-lo)]
				}
				m, rel, err := c.Get(b)
				if errors.Is(err, roce.ErrLimit) { // all six regions in use by the six workers
					limits.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				gets.Add(1)
				a := addrOf(b)
				if a < m.Addr() || a+uint64(len(b)) > m.Addr()+uint64(m.Len()) {
					t.Errorf("region [%#x, +%d) does not contain [%#x, +%d)", m.Addr(), m.Len(), a, len(b))
				}
				if r.IntN(4) == 0 {
					runtime.Gosched()
				}
				if !c.Registered(m) {
					t.Error("a region in use was deregistered")
				}
				rel()
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	if st.Hits+st.Misses != uint64(gets.Load()+limits.Load()) || st.InUse != 0 || st.Entries > 6 {
		t.Fatalf("stats %+v after %d gets and %d refusals", st, gets.Load(), limits.Load())
	}
	if st.Hits == 0 || st.Expired+st.Evicted == 0 {
		t.Fatalf("stats %+v: the run exercised no hit or no eviction", st)
	}
	t.Logf("%+v, %d refusals", st, limits.Load())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("a region outlived Close: %v", err)
	}
}

// TestRegCacheWrite moves data with RDMA WRITEs between regions both ends take
// from their caches over link/pipe, then checks that once the target's region
// is evicted its old rkey is refused.
func TestRegCacheWrite(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 1500})
	x, y := connectRC(t, p, connCfg{bufSize: 4096})
	var clkX, clkY fakeClock
	cx, err := roce.NewRegCacheClock(x.pd, roce.RegCacheConfig{Access: roce.LocalWrite}, clkX.now)
	if err != nil {
		t.Fatal(err)
	}
	cy, err := roce.NewRegCacheClock(y.pd, roce.RegCacheConfig{Idle: time.Second}, clkY.now)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := make([]byte, 256<<10), make([]byte, 256<<10)
	write := func(from, to []byte, rkey uint32) roce.WC {
		t.Helper()
		ms, rel, err := cx.Get(from)
		if err != nil {
			t.Fatal(err)
		}
		defer rel()
		if err := x.qp.PostSend(roce.SendWR{ID: 7, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
			SGL:        []roce.SGE{{Addr: addrOf(from), Length: uint32(len(from)), LKey: ms.LKey()}},
			RemoteAddr: addrOf(to), RKey: rkey}); err != nil {
			t.Fatal(err)
		}
		return waitWC(t, x.scq)
	}
	var first *roce.MR
	for i := range 4 {
		fill(src, byte(i))
		md, rel := mustGet(t, cy, dst)
		if first == nil {
			first = md
		} else if md != first {
			t.Fatalf("transfer %d: target registered again", i)
		}
		if wc := write(src, dst, md.RKey()); wc.Status != roce.WCSuccess {
			t.Fatalf("transfer %d: %v", i, wc.Status)
		}
		rel()
		if !bytes.Equal(dst, src) {
			t.Fatalf("transfer %d: data differs", i)
		}
	}
	// A sub-slice of the target uses the same region and rkey.
	fill(src, 99)
	sub := dst[8192 : 8192+10000]
	want := bytes.Clone(dst)
	copy(want[8192:], src[:len(sub)])
	md, rel := mustGet(t, cy, sub)
	if md != first {
		t.Fatal("sub-slice of the target: registered again")
	}
	if wc := write(src[:len(sub)], sub, md.RKey()); wc.Status != roce.WCSuccess {
		t.Fatalf("sub-slice: %v", wc.Status)
	}
	rel()
	if !bytes.Equal(dst, want) {
		t.Fatal("sub-slice write: data differs or landed outside the sub-slice")
	}
	if st := cy.Stats(); st.Hits != 4 || st.Misses != 1 {
		t.Fatalf("target cache %+v, want 4 hits and 1 miss", st)
	}
	if st := cx.Stats(); st.Hits != 4 || st.Misses != 1 {
		t.Fatalf("source cache %+v, want 4 hits (a sub-slice) and 1 miss", st)
	}

	// Evict the target region; a WRITE with its old rkey fails remotely
	// and lands nothing.
	clkY.advance(time.Second)
	cy.Sweep()
	if st := cy.Stats(); st.Expired != 1 || st.Entries != 0 {
		t.Fatalf("target cache after Idle: %+v", st)
	}
	before := bytes.Clone(dst)
	fill(src, 200)
	if wc := write(src, dst, first.RKey()); wc.Status != roce.WCRemAccessErr {
		t.Fatalf("write with an evicted rkey: %v, want %v", wc.Status, roce.WCRemAccessErr)
	}
	if !bytes.Equal(dst, before) {
		t.Fatal("a write with an evicted rkey changed the target")
	}
}

// BenchmarkRegCache compares a transfer that registers both buffers, WRITEs
// and deregisters them (uncached) with one that takes the regions from caches
// (cached), over link/pipe; reg-only leaves out the WRITE.
func BenchmarkRegCache(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 20} {
		name := "size=" + itoa(size>>10) + "K"
		for _, mode := range []string{"uncached", "cached", "reg-only-uncached", "reg-only-cached"} {
			b.Run(name+"/"+mode, func(b *testing.B) { benchRegCache(b, size, mode) })
		}
	}
}

func benchRegCache(b *testing.B, size int, mode string) {
	p, _, _ := newPipeDevices(b, pipe.Config{MTU: 9000, Depth: 4096, TxBuffers: 1024})
	x, y := connectRC(b, p, connCfg{bufSize: 4096})
	src, dst := make([]byte, size), make([]byte, size)
	fill(src, 1)
	cx, err := x.pd.RegCache(roce.RegCacheConfig{Access: roce.LocalWrite})
	if err != nil {
		b.Fatal(err)
	}
	defer cx.Close()
	cy, err := y.pd.RegCache(roce.RegCacheConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer cy.Close()
	cached := mode == "cached" || mode == "reg-only-cached"
	transfer := mode == "cached" || mode == "uncached"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sgl := []roce.SGE{{Addr: addrOf(src), Length: uint32(size)}}
	var wcs [1]roce.WC
	if transfer {
		b.SetBytes(int64(size))
	}
	b.ReportAllocs()
	for b.Loop() {
		var ms, md *roce.MR
		var relS, relD func()
		if cached {
			if ms, relS, err = cx.Get(src); err == nil {
				md, relD, err = cy.Get(dst)
			}
		} else if ms, err = x.pd.RegMR(src, roce.LocalWrite); err == nil {
			md, err = y.pd.RegMR(dst, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead)
		}
		if err != nil {
			b.Fatal(err)
		}
		if transfer {
			sgl[0].LKey = ms.LKey()
			if err := x.qp.PostSend(roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.Signaled, SGL: sgl,
				RemoteAddr: md.Addr(), RKey: md.RKey()}); err != nil {
				b.Fatal(err)
			}
			if n, err := x.scq.Wait(ctx, wcs[:]); err != nil || n != 1 || wcs[0].Status != roce.WCSuccess {
				b.Fatalf("n=%d err=%v wc=%+v", n, err, wcs[0])
			}
		}
		if cached {
			relS()
			relD()
		} else if err := errors.Join(ms.Deregister(), md.Deregister()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if transfer && !bytes.Equal(src, dst) {
		b.Fatal("data differs")
	}
}
