package shm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/linktest"
	"github.com/xdproce/xdproce/link/shm"
)

// newPair makes a port in this process: d is the creator's end, c the
// attached one.
func newPair(t testing.TB, cfg shm.Config) (d, c *shm.Link) {
	t.Helper()
	d, fds, err := shm.NewPort(cfg)
	if err != nil {
		t.Fatalf("NewPort: %v", err)
	}
	c, err = shm.Attach(fds)
	if err != nil {
		d.Close()
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { d.Close(); c.Close() })
	return d, c
}

func TestConformance(t *testing.T) {
	for _, mtu := range []int{1500, 0, 9000} {
		t.Run("MTU"+strconv.Itoa(mtu), func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				d, c := newPair(t, shm.Config{MTU: mtu, Ring: 64, Buffers: 48})
				return linktest.Pair{A: d, B: c,
					AddrA: netip.MustParseAddr("198.51.100.1"), AddrB: netip.MustParseAddr("198.51.100.2")}
			})
		})
	}
	t.Run("IPv6", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) linktest.Pair {
			d, c := newPair(t, shm.Config{})
			// The attached end as A: the suite's one-way tests run the
			// other direction too.
			return linktest.Pair{A: c, B: d,
				AddrA: netip.MustParseAddr("2001:db8::1"), AddrB: netip.MustParseAddr("2001:db8::2")}
		})
	})
}

func TestNewPortRejectsBadConfig(t *testing.T) {
	for _, cfg := range []shm.Config{
		{MTU: 67}, {MTU: 70000}, {MTU: -1}, {Ring: 3}, {Ring: 1}, {Ring: -8}, {Ring: 1 << 16},
		{Buffers: -1}, {Buffers: shm.MaxBuffers + 1}, {MTU: 65000, Ring: shm.MaxRing, Buffers: shm.MaxBuffers},
	} {
		d, fds, err := shm.NewPort(cfg)
		if err == nil || d != nil || fds != nil {
			t.Errorf("NewPort(%+v) = %v, %v, %v; want an error", cfg, d, fds, err)
		}
	}
}

func TestProps(t *testing.T) {
	d, c := newPair(t, shm.Config{})
	for _, l := range []*shm.Link{d, c} {
		p := l.Props()
		if p.Name != "shm" || p.MTU != shm.DefaultMTU || p.MaxFrame != shm.DefaultMTU+18 || p.HWAddr != nil || p.SrcPort != 0 || p.SyntheticHeaders {
			t.Errorf("Props() = %+v", p)
		}
	}
}

// frame fills b[:n] with a pattern keyed by id.
func frame(b []byte, id, n int) []byte {
	b = b[:n]
	for i := range b {
		b[i] = byte(id*7 + i)
	}
	return b
}

// sendN sends n frames of size bytes with ids from id0, in batches.
func sendN(t testing.TB, l *shm.Link, id0, n, size int) {
	t.Helper()
	bufs := make([][]byte, 16)
	for i := 0; i < n; {
		k := l.Alloc(bufs[:min(16, n-i)])
		if k == 0 {
			t.Fatalf("Alloc gave no buffer after %d frames", i)
		}
		for j := range k {
			bufs[j] = frame(bufs[j], id0+i+j, size)
		}
		if err := l.Send(bufs[:k]); err != nil {
			t.Fatalf("Send: %v", err)
		}
		i += k
	}
}

// recvN receives frames until n have come or timeout passes, and checks
// them against the pattern of ids from id0.
func recvN(t testing.TB, l *shm.Link, id0, n, size int, timeout time.Duration) {
	t.Helper()
	frames := make([][]byte, 32)
	want := make([]byte, size)
	deadline := time.Now().Add(timeout)
	for got := 0; got < n; {
		k, err := l.Receive(frames)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, f := range frames[:k] {
			if !bytes.Equal(f, frame(want, id0+got, size)) {
				t.Fatalf("frame %d: %d bytes, not the ones sent", got, len(f))
			}
			got++
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d frames", got, n)
			}
			l.Wait(10 * time.Millisecond)
		}
	}
}

// TestPMTU4096Frames moves full-size frames of the default MTU (what a RoCE
// path MTU of 4096 needs) both ways.
func TestPMTU4096Frames(t *testing.T) {
	// The 8 frames the receiver's last Receive lent keep their ring
	// positions until its next Receive: a ring of 16 holds them and 8 more.
	d, c := newPair(t, shm.Config{Ring: 16})
	size := d.Props().MaxFrame
	if size < 4096+14+20+8+12+16+4 {
		t.Fatalf("MaxFrame %d cannot carry a PMTU 4096 RDMA WRITE first packet", size)
	}
	for round := range 20 {
		sendN(t, d, round*8, 8, size)
		recvN(t, c, round*8, 8, size, 5*time.Second)
		sendN(t, c, round*8, 8, size)
		recvN(t, d, round*8, 8, size, 5*time.Second)
	}
	if sd, sc := d.Stats(), c.Stats(); sd.Sent != 160 || sd.Received != 160 || sc.Sent != 160 || sc.Received != 160 || sd.Overflow+sc.Overflow+sd.BadDescs+sc.BadDescs != 0 {
		t.Errorf("stats %+v, %+v", sd, sc)
	}
}

// TestOverflowIsBounded: with a ring of 8, the 9th frame in flight is
// dropped and counted, and the link recovers once the receiver drains.
func TestOverflowIsBounded(t *testing.T) {
	d, c := newPair(t, shm.Config{Ring: 8, Buffers: 32})
	sendN(t, d, 0, 20, 100)
	if st := d.Stats(); st.Sent != 8 || st.Overflow != 12 {
		t.Errorf("after 20 frames into a ring of 8: %+v", st)
	}
	recvN(t, c, 0, 8, 100, time.Second)
	if n, _ := c.Receive(make([][]byte, 8)); n != 0 {
		t.Errorf("%d more frames than the ring holds", n)
	}
	sendN(t, d, 100, 8, 100)
	recvN(t, c, 100, 8, 100, time.Second)
}

// TestNoWakeupWhileBusy: a consumer that never sleeps costs the producer no
// eventfd signal; one that sleeps between frames gets one per sleep.
func TestNoWakeupWhileBusy(t *testing.T) {
	d, c := newPair(t, shm.Config{Ring: 64})
	for i := range 100 {
		sendN(t, d, i*10, 10, 200)
		recvN(t, c, i*10, 10, 200, time.Second)
	}
	if st := d.Stats(); st.Wakeups != 0 || st.Sent != 1000 {
		t.Fatalf("busy consumer: %+v, want 1000 sent and no wake-up", st)
	}
	done := make(chan error)
	go func() {
		for range 20 {
			if err := c.Wait(5 * time.Second); err != nil {
				done <- err
				return
			}
			if n, _ := c.Receive(make([][]byte, 4)); n != 1 {
				done <- errors.New("woken without a frame")
				return
			}
			done <- nil
		}
	}()
	for i := range 20 {
		time.Sleep(2 * time.Millisecond) // let it fall asleep
		sendN(t, d, i, 1, 200)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st := d.Stats(); st.Wakeups == 0 || st.Wakeups > 20 {
		t.Errorf("sleeping consumer: %d wake-ups for 20 frames", st.Wakeups)
	}
}

// TestPeerClose: frames queued before the peer closed are still received;
// then Wait and Send say the peer is gone, at once.
func TestPeerClose(t *testing.T) {
	for _, creatorCloses := range []bool{true, false} {
		d, c := newPair(t, shm.Config{Ring: 16})
		gone, stay := d, c
		if !creatorCloses {
			gone, stay = c, d
		}
		sendN(t, gone, 0, 3, 300)
		if err := gone.Close(); err != nil {
			t.Fatal(err)
		}
		if err := stay.Wait(time.Second); err != nil {
			t.Fatalf("Wait with frames queued: %v", err)
		}
		recvN(t, stay, 0, 3, 300, time.Second)
		start := time.Now()
		err := stay.Wait(10 * time.Second)
		if !errors.Is(err, shm.ErrPeerGone) || !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Wait after the peer closed: %v, want ErrPeerGone matching link.ErrClosed", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("Wait took %v to see the peer gone", el)
		}
		if !stay.PeerGone() {
			t.Error("PeerGone() false")
		}
		bufs := make([][]byte, 2)
		if stay.Alloc(bufs) != 2 {
			t.Fatal("Alloc after the peer went gave no buffer")
		}
		if err := stay.Send(bufs); !errors.Is(err, shm.ErrPeerGone) {
			t.Errorf("Send after the peer went: %v", err)
		}
		if err := stay.Nap(time.Second); !errors.Is(err, shm.ErrPeerGone) {
			t.Errorf("Nap after the peer went: %v", err)
		}
		if n, err := stay.Receive(bufs); n != 0 || err != nil {
			t.Errorf("Receive after the peer went: %d, %v", n, err)
		}
	}
}

// TestUnattachedPortFdsClosed: a port whose other end is never attached
// (its descriptors closed) reads as a gone peer.
func TestUnattachedPortFdsClosed(t *testing.T) {
	d, fds, err := shm.NewPort(shm.Config{Ring: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Wait(20 * time.Millisecond); err != nil {
		t.Fatalf("Wait while the descriptors are held: %v", err)
	}
	fds.Close()
	if err := d.Wait(5 * time.Second); !errors.Is(err, shm.ErrPeerGone) {
		t.Fatalf("Wait after the descriptors closed: %v", err)
	}
}

func TestAttachRefuses(t *testing.T) {
	memfd := func(size int64, seals int, write func([]byte)) int {
		fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			t.Fatal(err)
		}
		if write != nil {
			m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			write(m)
			unix.Munmap(m)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		return fd
	}
	// A real port's memfd, read to learn its size and header.
	_, good, err := shm.NewPort(shm.Config{Ring: 4, MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Fstat(good.Mem, &st)
	hdr := make([]byte, 64)
	unix.Pread(good.Mem, hdr, 0)
	good.Close()
	sealed := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	for _, tc := range []struct {
		name string
		mem  func() int
	}{
		{"not a memfd", func() int { fd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC); return fd }},
		{"unsealed", func() int { return memfd(st.Size, 0, func(m []byte) { copy(m, hdr) }) }},
		{"tiny", func() int { return memfd(100, sealed, nil) }},
		{"zeros", func() int { return memfd(st.Size, sealed, nil) }},
		{"bigger than its header says", func() int { return memfd(st.Size+4096, sealed, func(m []byte) { copy(m, hdr) }) }},
		{"ring not a power of two", func() int {
			return memfd(st.Size, sealed, func(m []byte) { copy(m, hdr); m[16] = 3 })
		}},
		{"slot size lies", func() int {
			return memfd(st.Size, sealed, func(m []byte) { copy(m, hdr); m[24]++ })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &shm.PortFds{Mem: tc.mem(), Down: -1, Up: -1, Live: -1}
			p.Down, _ = unix.Eventfd(0, unix.EFD_CLOEXEC)
			p.Up, _ = unix.Eventfd(0, unix.EFD_CLOEXEC)
			p.Live, _ = unix.Eventfd(0, unix.EFD_CLOEXEC)
			fds := *p
			l, err := shm.Attach(p)
			if err == nil {
				l.Close()
				t.Fatal("Attach succeeded")
			}
			t.Log(err)
			if p.Mem != -1 || p.Down != -1 || p.Up != -1 || p.Live != -1 {
				t.Errorf("Attach left descriptors in %+v", *p)
			}
			for _, fd := range []int{fds.Mem, fds.Down, fds.Up, fds.Live} {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
					t.Errorf("fd %d still open after a failed Attach", fd)
				}
			}
		})
	}
}

// TestCloseDuringUse: Close from another goroutine while the owner keeps
// calling every method must not fault (the mapping goes only once no call
// is inside it); the owner then gets link.ErrClosed.
func TestCloseDuringUse(t *testing.T) {
	for range 20 {
		d, c := newPair(t, shm.Config{Ring: 16})
		done := make(chan error)
		go func() {
			bufs := make([][]byte, 4)
			frames := make([][]byte, 8)
			for {
				k := d.Alloc(bufs)
				for i := range k {
					bufs[i] = bufs[i][:100]
				}
				err := d.Send(bufs[:k])
				if _, rerr := d.Receive(frames); rerr != nil || errors.Is(err, link.ErrClosed) {
					done <- rerr
					return
				}
				d.Wait(0)
				d.Free(bufs[:0])
			}
		}()
		go func() {
			frames := make([][]byte, 8)
			for {
				if _, err := c.Receive(frames); err != nil {
					return
				}
				c.Wait(time.Millisecond)
			}
		}()
		time.Sleep(2 * time.Millisecond)
		d.Close()
		if err := <-done; !errors.Is(err, link.ErrClosed) {
			t.Fatalf("owner's Receive after a concurrent Close: %v", err)
		}
		c.Close()
	}
}

// TestNap: a frame arriving during Nap does not cost the sender a signal
// nor end the nap; it waits in the ring. Wake ends a nap at once.
func TestNap(t *testing.T) {
	d, c := newPair(t, shm.Config{Ring: 16})
	c.Wait(0)
	sent := make(chan error, 1)
	go func() {
		time.Sleep(10 * time.Millisecond)
		bufs := make([][]byte, 1)
		if d.Alloc(bufs) != 1 {
			sent <- errors.New("no buffer")
			return
		}
		bufs[0] = frame(bufs[0], 1, 100)
		sent <- d.Send(bufs)
	}()
	start := time.Now()
	if err := c.Nap(80 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Errorf("Nap(80ms) ended after %v: woken by the frame", el)
	}
	recvN(t, c, 1, 1, 100, time.Second)
	if st := d.Stats(); st.Wakeups != 0 {
		t.Errorf("the sender signalled a napping receiver: %+v", st)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.Wake()
	}()
	start = time.Now()
	if err := c.Nap(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Nap ended %v after a Wake 10ms in", el)
	}
}
