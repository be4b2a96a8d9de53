package shm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// A Link is one end of a port. It implements link.Link and link.Napper.
type Link struct {
	props link.Props
	mem   []byte
	tx    txQueue
	rx    rxQueue
	// rxWake is the eventfd this end sleeps on (the peer signals it, Wake
	// too); txWake the one it signals the peer on; live its end of the
	// liveness socket pair.
	rxWake, txWake, live int

	// life is held shared by every call touching the mapping or the
	// descriptors and exclusively by Close while it unmaps and closes them.
	life     sync.RWMutex
	closing  atomic.Bool
	peerGone atomic.Bool

	// Used only under the owner's calls (Wait, Nap).
	pfd  [2]unix.PollFd
	ts   unix.Timespec
	rbuf [64]byte

	sent, received, overflow, wakeups, badDescs, badIndexes atomic.Uint64
}

var (
	_ link.Link   = (*Link)(nil)
	_ link.Napper = (*Link)(nil)
)

// one is an eventfd increment of 1 (host byte order).
var one = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return }()

func newLink(mem []byte, lay *layout, txDir, rxWake, txWake, live int) *Link {
	l := &Link{
		props:  link.Props{Name: "shm", MTU: lay.mtu, MaxFrame: lay.maxFrame},
		mem:    mem,
		tx:     newTxQueue(mem, lay, txDir),
		rx:     newRxQueue(mem, lay, 1-txDir),
		rxWake: rxWake,
		txWake: txWake,
		live:   live,
	}
	l.pfd[0] = unix.PollFd{Fd: int32(rxWake), Events: unix.POLLIN}
	l.pfd[1] = unix.PollFd{Fd: int32(live), Events: unix.POLLIN}
	return l
}

// Props describes the link: Name "shm", the port's MTU, MaxFrame = MTU+18,
// no hardware address.
func (l *Link) Props() link.Props { return l.props }

// Stats returns this end's counters.
func (l *Link) Stats() Stats {
	return Stats{Sent: l.sent.Load(), Received: l.received.Load(), Overflow: l.overflow.Load(),
		Wakeups: l.wakeups.Load(), BadDescs: l.badDescs.Load(), BadIndexes: l.badIndexes.Load()}
}

func (l *Link) add(c *counts) {
	for _, x := range [...]struct {
		v *atomic.Uint64
		n uint64
	}{{&l.sent, c.sent}, {&l.received, c.received}, {&l.overflow, c.overflow},
		{&l.wakeups, c.wakeups}, {&l.badDescs, c.badDescs}, {&l.badIndexes, c.badIndexes}} {
		if x.n != 0 {
			x.v.Add(x.n)
		}
	}
}

// Alloc hands out free transmit buffers of MaxFrame bytes in the frame area
// of this end's direction, reclaiming those the peer has consumed.
func (l *Link) Alloc(bufs [][]byte) int {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() {
		return 0
	}
	var c counts
	n := l.tx.alloc(bufs, &c)
	l.add(&c)
	return n
}

// Free hands back unsent buffers from Alloc; other slices are ignored.
func (l *Link) Free(bufs [][]byte) {
	l.life.RLock()
	defer l.life.RUnlock()
	if !l.closing.Load() {
		l.tx.put(bufs)
	}
}

// Send queues the frames on the ring to the peer, without a copy, and
// signals the peer's eventfd only if it said it sleeps. A frame that finds
// the ring full is dropped (Stats.Overflow). It returns link.ErrClosed after
// Close, ErrPeerGone once the peer is known to be gone (the frames are
// dropped), and an error for a buffer not from Alloc or a frame shorter
// than 14 bytes (the other frames are still sent).
func (l *Link) Send(frames [][]byte) error {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() {
		return link.ErrClosed
	}
	if l.peerGone.Load() {
		l.tx.put(frames)
		return ErrPeerGone
	}
	var c counts
	queued, err := l.tx.send(frames, &c)
	if queued && l.tx.wantsWake() {
		unix.Write(l.txWake, one[:]) // EAGAIN only when a peer let the counter near its limit
		c.wakeups++
	}
	l.add(&c)
	return err
}

// SendCopy copies frame into a transmit buffer, with hdr (when not nil)
// over its first len(hdr) bytes, and queues it; it reports whether the frame
// was queued (false: no free buffer, or the frame is longer than MaxFrame,
// or the ring was full). Unlike Alloc, a write and Send, it holds the link
// open from the allocation to the queueing, so a Close from another
// goroutine cannot unmap the buffer while it is being written: the
// xdproce daemon delivers to a client's port while the client may detach.
func (l *Link) SendCopy(frame, hdr []byte) (bool, error) {
	queued, _, err := l.sendCopy(frame, hdr, true)
	return queued, err
}

// sendCopy is SendCopy, signalling the peer when wake; crowded reports a
// ring more than half full.
func (l *Link) sendCopy(frame, hdr []byte, wake bool) (queued, crowded bool, err error) {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() {
		return false, false, link.ErrClosed
	}
	if l.peerGone.Load() {
		return false, false, ErrPeerGone
	}
	var c counts
	defer l.add(&c)
	var fb [1][]byte
	if l.tx.alloc(fb[:], &c) == 0 {
		return false, true, nil
	}
	if len(frame) > len(fb[0]) {
		l.tx.put(fb[:])
		return false, false, nil
	}
	b := fb[0][:len(frame)]
	copy(b, frame)
	copy(b, hdr)
	fb[0] = b
	queued, err = l.tx.send(fb[:], &c)
	if queued && wake && l.tx.wantsWake() {
		unix.Write(l.txWake, one[:])
		c.wakeups++
	}
	return queued, 2*(l.tx.prod-l.tx.cons) > l.tx.size, err
}

// Receive lends up to len(frames) frames from the ring from the peer; they
// alias the shared frame area and stay valid until the next Receive, which
// hands them back. Their bytes are shared with the peer: a hostile peer can
// change them while they are read. It never blocks and keeps returning what
// is queued after the peer is gone.
func (l *Link) Receive(frames [][]byte) (int, error) {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() {
		return 0, link.ErrClosed
	}
	var c counts
	n := l.rx.receive(frames, &c)
	l.add(&c)
	return n, nil
}

// Wait blocks until a frame can be received, Wake is called, the link is
// closed, the peer goes, or the timeout passes (negative: no limit; 0: just
// look). It raises the need-wakeup flag while it sleeps so that the peer
// signals its eventfd. It returns ErrPeerGone once the peer is gone and
// nothing is left to receive.
func (l *Link) Wait(timeout time.Duration) error { return l.sleep(timeout, true) }

// Nap blocks until Wake is called, the link is closed, the peer goes, or the
// timeout passes, without asking the peer to signal arriving frames: they
// wait in the ring (which holds Config.Ring frames).
func (l *Link) Nap(timeout time.Duration) error { return l.sleep(timeout, false) }

func (l *Link) sleep(timeout time.Duration, onFrame bool) error {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closing.Load() {
		return link.ErrClosed
	}
	if onFrame && l.rx.avail(nil) > 0 {
		return nil
	}
	// Raise the flag, then look again: a frame published before the flag
	// was seen is caught here, one after it brings a signal.
	flag := onFrame && timeout != 0
	if flag {
		l.rx.need.Store(1)
		if l.rx.avail(nil) > 0 {
			l.rx.need.Store(0)
			return nil
		}
	}
	if !l.peerGone.Load() {
		if err := l.poll(timeout); err != nil {
			return err
		}
	}
	if flag {
		l.rx.need.Store(0)
	}
	switch {
	case l.closing.Load():
		return link.ErrClosed
	case l.peerGone.Load() && l.rx.avail(nil) == 0:
		return ErrPeerGone
	}
	return nil
}

// poll sleeps on the wake-up eventfd and the liveness socket.
func (l *Link) poll(timeout time.Duration) error {
	var ts *unix.Timespec
	if timeout >= 0 {
		l.ts = unix.NsecToTimespec(int64(timeout))
		ts = &l.ts
	}
	l.pfd[0].Revents, l.pfd[1].Revents = 0, 0
	if _, err := unix.Ppoll(l.pfd[:], ts, nil); err != nil && err != unix.EINTR {
		return fmt.Errorf("shm: wait: ppoll: %w", err)
	}
	if l.pfd[0].Revents&unix.POLLIN != 0 {
		unix.Read(l.rxWake, l.rbuf[:8]) // reset the counter
	}
	if ev := l.pfd[1].Revents; ev != 0 {
		l.checkLive(ev)
	}
	return nil
}

// checkLive reads what made the liveness socket ready: end of file, or a
// hang-up or error, means the peer closed its end or exited. Bytes a peer
// wrote into it are read and ignored.
func (l *Link) checkLive(ev int16) {
	gone := ev&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	if !gone && ev&unix.POLLIN != 0 {
		n, err := unix.Read(l.live, l.rbuf[:])
		gone = n == 0 && err == nil
	}
	if gone {
		l.peerGone.Store(true)
		l.pfd[1].Fd = -1 // stays ready: poll it no more
	}
}

// PeerGone reports whether this end has seen the peer go (in Wait or Nap).
func (l *Link) PeerGone() bool { return l.peerGone.Load() }

// Wake makes a concurrent Wait or Nap, or else the next one, return at once.
func (l *Link) Wake() {
	l.life.RLock()
	defer l.life.RUnlock()
	if !l.closing.Load() {
		unix.Write(l.rxWake, one[:])
	}
}

// Close closes this end: it wakes a concurrent Wait, unmaps the port and
// closes the descriptors, which the peer sees as the liveness socket's end
// of file. Later calls return link.ErrClosed.
func (l *Link) Close() error {
	if !l.closing.CompareAndSwap(false, true) {
		return link.ErrClosed
	}
	unix.Write(l.rxWake, one[:])
	l.life.Lock()
	defer l.life.Unlock()
	unix.Munmap(l.mem)
	l.mem = nil
	for _, fd := range [...]int{l.rxWake, l.txWake, l.live} {
		unix.Close(fd)
	}
	return nil
}
