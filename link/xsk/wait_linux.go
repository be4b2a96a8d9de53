package xsk

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Wait blocks until a frame may be received, Wake is called, or the timeout
// passes (negative: no limit). It returns ErrClosed after Close.
func (s *Socket) Wait(timeout time.Duration) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	timeout = s.txStuckTimeout(timeout)
	if s.rx.avail() > 0 {
		return nil
	}
	var ts *unix.Timespec
	if timeout >= 0 {
		s.ts = unix.NsecToTimespec(int64(timeout))
		ts = &s.ts
	}
	return s.poll(s.pollFDs[:], ts)
}

// poll waits in ppoll for fds (the socket and the wake eventfd, or the
// eventfd alone) and drains the eventfd.
func (s *Socket) poll(fds []unix.PollFd, ts *unix.Timespec) error {
	return ppollWake(fds, ts, s.efd, s.drain[:], &s.closed)
}

// ppollWake waits in ppoll for fds, whose last entry is the wake eventfd
// efd, and drains efd when it was readable. It returns link.ErrClosed when
// closed is set by then.
func ppollWake(fds []unix.PollFd, ts *unix.Timespec, efd int, drain []byte, closed *atomic.Bool) error {
	for i := range fds {
		fds[i].Revents = 0
	}
	_, err := unix.Ppoll(fds, ts, nil)
	if fds[len(fds)-1].Revents&unix.POLLIN != 0 {
		unix.Read(efd, drain)
	}
	if closed.Load() {
		return link.ErrClosed
	}
	if err != nil && err != unix.EINTR {
		return os.NewSyscallError("ppoll", err)
	}
	return nil
}

// Nap blocks until Wake is called or the timeout passes (negative: no
// limit), not woken by received frames, which wait in the RX ring (see
// link.Napper). Frames the kernel refused are kicked again first, and the
// nap is then bounded by TxRetryWait as Wait is. It returns ErrClosed after
// Close.
func (s *Socket) Nap(timeout time.Duration) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	timeout = s.txStuckTimeout(timeout)
	var ts *unix.Timespec
	if timeout >= 0 {
		s.ts = unix.NsecToTimespec(int64(timeout))
		ts = &s.ts
	}
	return s.poll(s.pollFDs[1:], ts)
}

// Wake makes a concurrent or the next Wait return at once. Safe for
// concurrent use.
func (s *Socket) Wake() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.efd >= 0 {
		unix.Write(s.efd, s.one[:])
	}
}

// Close closes the socket and frees its UMEM, waiting for a running Receive,
// Send or Wait (which it wakes) to finish. Later calls return ErrClosed.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return link.ErrClosed
	}
	s.Wake()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release()
	return nil
}
