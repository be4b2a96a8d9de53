package xsk

import (
	"errors"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Errors returned by Send (package variables: the per-packet path makes no new
// error values).
var (
	// ErrForeignBuffer: a frame passed to Send does not start at a buffer
	// handed out by Alloc.
	ErrForeignBuffer = errors.New("xsk: send: buffer not from Alloc")
	// ErrFrameTooLarge: a frame passed to Send is longer than Props().MaxFrame.
	ErrFrameTooLarge = errors.New("xsk: send: frame longer than MaxFrame")

	// errTxRingFull cannot happen (the TX ring has room for every chunk of
	// every slot); it is reported rather than overwriting the ring.
	errTxRingFull = errors.New("xsk: send: tx ring full")
)

// Alloc stores up to len(bufs) empty transmit buffers (len == MaxFrame) in
// bufs and returns how many; 0 when every buffer is in flight.
func (s *Socket) Alloc(bufs [][]byte) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if len(s.txFree) < len(bufs) {
		s.reclaim()
		if len(s.txFree) < len(bufs) && s.tx.pending() {
			s.kickTx()
			s.reclaim()
		}
	}
	n := min(len(bufs), len(s.txFree))
	for i := range n {
		a := s.txFree[len(s.txFree)-1-i]
		bufs[i] = s.umem[a : a+s.slotBytes : a+s.slotBytes]
	}
	s.txFree = s.txFree[:len(s.txFree)-n]
	return n
}

// reclaim moves completed TX slots back to the free list.
func (s *Socket) reclaim() {
	n := s.comp.avail()
	for range n {
		a := *s.comp.addr(s.comp.cons)
		s.comp.cons++
		// Only a slot's first chunk stands for the slot; the completions of
		// the other chunks of a multi-buffer frame are dropped here.
		if a >= s.txBase && (a-s.txBase)%s.slotBytes == 0 {
			s.txFree = append(s.txFree, a)
		}
	}
	if n > 0 {
		s.comp.release()
	}
}

// slotOf returns the UMEM address of the TX slot b starts at.
func (s *Socket) slotOf(b []byte) (uint64, bool) {
	if cap(b) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < s.umemBase+uintptr(s.txBase) || p >= s.umemBase+uintptr(len(s.umem)) {
		return 0, false
	}
	a := uint64(p - s.umemBase)
	if (a-s.txBase)%s.slotBytes != 0 {
		return 0, false
	}
	return a, true
}

// Send queues the frames for transmission. Every buffer returns to the link,
// whatever the result; a frame that is not from Alloc (ErrForeignBuffer) or
// too long (ErrFrameTooLarge) is skipped and the error reported after the
// others are queued.
func (s *Socket) Send(frames [][]byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	var bad error
	queued := false
	for _, f := range frames {
		a, ok := s.slotOf(f)
		if !ok {
			bad = ErrForeignBuffer
			continue
		}
		if len(f) > s.maxFrame {
			bad = ErrFrameTooLarge
			s.txFree = append(s.txFree, a)
			continue
		}
		if len(f) == 0 {
			s.txFree = append(s.txFree, a)
			continue
		}
		need := uint32((uint64(len(f)) + s.chunk - 1) / s.chunk)
		// The TX ring has a place for every chunk of every slot, so it is
		// never full when a slot is free to send from.
		if s.tx.free(need) < need {
			s.kickTx()
			if s.tx.free(need) < need {
				s.txFree = append(s.txFree, a)
				bad = errTxRingFull
				continue
			}
		}
		rest := uint64(len(f))
		for rest > 0 {
			l := min(rest, s.chunk)
			d := s.tx.desc(s.tx.prod)
			d.Addr, d.Len, d.Options = a, uint32(l), 0
			if rest > l {
				d.Options = unix.XDP_PKT_CONTD
			}
			s.tx.prod++
			a += l
			rest -= l
		}
		queued = true
	}
	if queued {
		s.tx.submit()
		s.kickTx()
	}
	return bad
}

// kickTx tells the kernel to transmit what is in the TX ring (copy mode always
// needs it; zero-copy only when the driver asks through need_wakeup).
func (s *Socket) kickTx() {
	if s.wakeup && !s.tx.needWakeup() {
		return
	}
	for range 4 {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if e != syscall.EAGAIN && e != syscall.EBUSY && e != syscall.ENOBUFS {
			return
		}
		if !s.tx.pending() {
			return
		}
	}
}

// TxRetryWait bounds a Wait while frames the kernel refused stay in the TX
// ring. In copy mode the send call transmits synchronously, so frames still
// pending after a kick were refused: the driver reported busy (a full
// hardware ring; veth since Linux 6.16, commit dc82a33297fc, when its peer's
// ring is full and a qdisc is attached) and restarts its queue later. Nothing
// wakes a poller when that happens; without the bound, a sender whose peer
// waits for the refused frames before it answers slept until its next timer
// (an RC ACK timeout, 67 ms and more).
const TxRetryWait = 50 * time.Microsecond

// txStuckTimeout kicks frames pending in the TX ring and returns the timeout
// of a Wait: timeout, or TxRetryWait if the kernel left frames in the ring
// (copy mode).
func (s *Socket) txStuckTimeout(timeout time.Duration) time.Duration {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if !s.tx.pending() {
		return timeout
	}
	s.kickTx()
	if s.txRefused() && (timeout < 0 || timeout > TxRetryWait) {
		s.txRetries.Add(1)
		return TxRetryWait
	}
	return timeout
}

func (s *Socket) txRefused() bool { return !s.zeroCopy && s.tx.pending() }

// TxRefused reports whether, in copy mode, frames stay in the TX ring that
// the kernel did not take at the last kick: a poller of several sockets
// should wait no longer than TxRetryWait before kicking again (Wait does
// this for its own socket). Safe for concurrent use.
func (s *Socket) TxRefused() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return !s.closed.Load() && s.txRefused()
}

// Free hands unsent buffers from Alloc back. Buffers not from Alloc are
// ignored.
func (s *Socket) Free(bufs [][]byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	for _, b := range bufs {
		if a, ok := s.slotOf(b); ok {
			s.txFree = append(s.txFree, a)
		}
	}
}
