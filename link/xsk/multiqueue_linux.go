package xsk

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// MultiQueue presents the sockets of several rx queues as one link.Link
// (and link.Napper): Receive drains every socket in turn, starting one
// socket further at each call; transmit buffers come from and go out through
// the first socket; Wait polls all sockets and a wake eventfd. It owns the
// sockets: Close closes them. The concurrency rules are a Socket's. Split
// shares the sockets out among several goroutines (link.Splitter).
type MultiQueue struct {
	socks []*Socket
	next  int // socket Receive starts with

	owner bool          // closes socks (false: a part made by Split, which closes only its eventfd)
	parts []*MultiQueue // parts of more than one socket made by Split: closed with m

	efd     int
	pfds    []unix.PollFd
	ts      unix.Timespec
	one     [8]byte
	drain   [8]byte
	mu      sync.RWMutex // Close waits for Wait
	closed  atomic.Bool
	closeMu sync.Once
}

var (
	_ link.Splitter = (*MultiQueue)(nil)
	_ link.Napper   = (*MultiQueue)(nil)
)

// NewMultiQueue joins socks (at least two; see Device.Link for any number)
// into one link. The sockets are the MultiQueue's from then on.
func NewMultiQueue(socks []*Socket) (*MultiQueue, error) {
	if len(socks) < 2 {
		return nil, fmt.Errorf("xsk: multi-queue link of %d sockets (want 2 or more)", len(socks))
	}
	m, err := newMultiQueue(socks)
	if err != nil {
		return nil, err
	}
	m.owner = true
	return m, nil
}

func newMultiQueue(socks []*Socket) (*MultiQueue, error) {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("xsk: multi-queue link: %w", os.NewSyscallError("eventfd", err))
	}
	m := &MultiQueue{socks: socks, efd: efd}
	m.one[0] = 1
	if isBigEndian() {
		m.one = [8]byte{7: 1}
	}
	for _, s := range socks {
		m.pfds = append(m.pfds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	m.pfds = append(m.pfds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
	return m, nil
}

// Queues is the number of sockets (link.Splitter).
func (m *MultiQueue) Queues() int { return len(m.socks) }

// Split shares the sockets out among n links (link.Splitter): part j has
// the sockets j, j+n, j+2n, ... in m's order, as the Socket itself when it
// is one, else as a MultiQueue over them (whose Alloc and Send use its first
// socket). m stays the sockets' owner: its Close closes the parts.
func (m *MultiQueue) Split(n int) ([]link.Link, error) {
	if !m.owner || n < 1 || n > len(m.socks) {
		return nil, fmt.Errorf("xsk: split %d sockets into %d parts", len(m.socks), n)
	}
	parts := make([]link.Link, n)
	for j := range n {
		var socks []*Socket
		for i := j; i < len(m.socks); i += n {
			socks = append(socks, m.socks[i])
		}
		if len(socks) == 1 {
			parts[j] = socks[0]
			continue
		}
		p, err := newMultiQueue(socks)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.parts = append(m.parts, p)
		m.mu.Unlock()
		parts[j] = p
	}
	return parts, nil
}

// Receive takes frames from every socket in turn until frames is full.
func (m *MultiQueue) Receive(frames [][]byte) (int, error) {
	n := 0
	for i := range m.socks {
		s := m.socks[(m.next+i)%len(m.socks)]
		k, err := s.Receive(frames[n:])
		n += k
		if err != nil {
			return n, err
		}
		if n == len(frames) {
			break
		}
	}
	m.next = (m.next + 1) % len(m.socks)
	return n, nil
}

// Alloc, Send, Free and Props are the first socket's.
func (m *MultiQueue) Alloc(bufs [][]byte) int    { return m.socks[0].Alloc(bufs) }
func (m *MultiQueue) Send(frames [][]byte) error { return m.socks[0].Send(frames) }
func (m *MultiQueue) Free(bufs [][]byte)         { m.socks[0].Free(bufs) }
func (m *MultiQueue) Props() link.Props          { return m.socks[0].Props() }

// TxRefused is the sending socket's (Socket.TxRefused).
func (m *MultiQueue) TxRefused() bool { return m.socks[0].TxRefused() }

// Wait lets every socket kick its pending transmissions (a zero-timeout
// Wait), then polls all sockets and the wake eventfd; no longer than
// TxRetryWait while the kernel leaves frames in the first socket's TX ring.
func (m *MultiQueue) Wait(timeout time.Duration) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return link.ErrClosed
	}
	for _, s := range m.socks {
		if err := s.Wait(0); err != nil {
			return err
		}
	}
	return m.poll(m.pfds, m.retryTimeout(timeout))
}

// Nap lets every socket kick its pending transmissions, then sleeps on the
// wake eventfd alone (link.Napper), bounded as Wait is.
func (m *MultiQueue) Nap(timeout time.Duration) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return link.ErrClosed
	}
	for _, s := range m.socks {
		if err := s.Nap(0); err != nil {
			return err
		}
	}
	return m.poll(m.pfds[len(m.pfds)-1:], m.retryTimeout(timeout))
}

// retryTimeout bounds timeout by TxRetryWait while the kernel refuses the
// sending socket's frames (see Socket.TxRefused).
func (m *MultiQueue) retryTimeout(timeout time.Duration) time.Duration {
	if m.socks[0].TxRefused() && (timeout < 0 || timeout > TxRetryWait) {
		return TxRetryWait
	}
	return timeout
}

// poll waits in ppoll for fds, whose last one is the wake eventfd.
func (m *MultiQueue) poll(fds []unix.PollFd, timeout time.Duration) error {
	var ts *unix.Timespec
	if timeout >= 0 {
		m.ts = unix.NsecToTimespec(int64(timeout))
		ts = &m.ts
	}
	return ppollWake(fds, ts, m.efd, m.drain[:], &m.closed)
}

// Wake makes a concurrent or the next Wait or Nap return at once. Safe for
// concurrent use.
func (m *MultiQueue) Wake() {
	if !m.closed.Load() {
		unix.Write(m.efd, m.one[:])
	}
}

// Close closes every socket, after waking and waiting for a running Wait or
// Nap (its own and those of the parts Split made). Later calls return
// link.ErrClosed. A part's Close closes its eventfd alone.
func (m *MultiQueue) Close() error {
	err := link.ErrClosed
	m.closeMu.Do(func() {
		m.closed.Store(true)
		unix.Write(m.efd, m.one[:])
		m.mu.Lock()
		var errs []error
		for _, p := range m.parts {
			p.Close()
		}
		for _, s := range m.socks {
			if !m.owner {
				break
			}
			if e := s.Close(); e != nil {
				errs = append(errs, e)
			}
		}
		unix.Close(m.efd)
		m.mu.Unlock()
		err = errors.Join(errs...)
	})
	return err
}

// Stats sums the sockets' counters (Socket.Stats). Not for the per-packet
// path; a part made by Split reads only its own sockets.
func (m *MultiQueue) Stats() (Stats, error) {
	var sum Stats
	for _, s := range m.socks {
		st, err := s.Stats()
		if err != nil {
			return sum, err
		}
		sum.Rx_dropped += st.Rx_dropped
		sum.Rx_invalid_descs += st.Rx_invalid_descs
		sum.Tx_invalid_descs += st.Tx_invalid_descs
		sum.Rx_ring_full += st.Rx_ring_full
		sum.Rx_fill_ring_empty_descs += st.Rx_fill_ring_empty_descs
		sum.Tx_ring_empty_descs += st.Tx_ring_empty_descs
		sum.RxTooLong += st.RxTooLong
		sum.RxJoined += st.RxJoined
		sum.RxCopied += st.RxCopied
		sum.TxRetryWaits += st.TxRetryWaits
	}
	return sum, nil
}
