package udp

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Wait blocks until a datagram can be received, Wake is called, the link is
// closed, or the timeout passes (negative: no limit). It returns at once
// while segments of a coalesced message received earlier wait for Receive.
func (l *Link) Wait(timeout time.Duration) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	if l.pend.msg < l.pend.msgs {
		return nil
	}
	var ts *unix.Timespec
	if timeout >= 0 {
		l.ts = unix.NsecToTimespec(int64(timeout))
		ts = &l.ts
	}
	l.pfd[0].Revents, l.pfd[1].Revents = 0, 0
	_, err := unix.Ppoll(l.pfd[:], ts, nil)
	if err != nil && err != unix.EINTR {
		return os.NewSyscallError("ppoll", err)
	}
	if l.pfd[1].Revents&unix.POLLIN != 0 {
		// Drain, then clear the flag. Clearing first would let a Wake in
		// between write efd and have this Read consume it, leaving the
		// flag set with efd empty: every later Wake would be skipped. A
		// Wake between the Read and the Store is skipped but served: it
		// came before this Wait returned, so the caller's next round sees
		// the work it announced.
		unix.Read(l.efd, l.efdBuf[:])
		l.waking.Store(false)
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	return nil
}

var one = [8]byte{1}

// Wake makes a concurrent Wait, or else the next one, return at once. Calls
// between two Waits cost one eventfd write in all.
func (l *Link) Wake() {
	if l.waking.Swap(true) {
		return
	}
	l.mu.RLock()
	if !l.closed.Load() {
		unix.Write(l.efd, one[:])
	}
	l.mu.RUnlock()
}

// Close closes the socket. A concurrent Wait returns; later calls return
// link.ErrClosed.
func (l *Link) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return link.ErrClosed
	}
	unix.Write(l.efd, one[:]) // wake a Wait holding the read lock
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closeFDs()
}

func (l *Link) closeFDs() error {
	var err error
	if l.fd >= 0 {
		if e := unix.Close(l.fd); e != nil {
			err = fmt.Errorf("udp: close: %w", os.NewSyscallError("close", e))
		}
		l.fd = -1
	}
	if l.efd >= 0 {
		unix.Close(l.efd)
		l.efd = -1
	}
	return err
}
