package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/xsk"
)

// openXSK opens an AF_XDP socket on every rx queue of the interface (or the
// first o.Queues) and attaches the steering program, which redirects UDP/4791
// frames for the interface's addresses (and the link-local GID) to them.
// Frames arriving on a queue without a socket go to the kernel and are lost
// to RoCE, so limiting Queues only makes sense on single-queue setups.
func openXSK(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	if len(info.hw) != 6 {
		return nil, nil, fmt.Errorf("AF_XDP: interface %s has no Ethernet address", info.name)
	}
	var cfg xsk.Config
	if o.Queues > 0 {
		n, err := xsk.QueueCount(info.name)
		if err != nil {
			return nil, nil, err
		}
		for q := 0; q < min(n, o.Queues); q++ {
			cfg.Queues = append(cfg.Queues, q)
		}
	}
	dev, err := xsk.Open(info.name, &cfg)
	if err != nil {
		return nil, nil, err
	}
	ips := append([]netip.Addr(nil), info.addrs...)
	ips = append(ips, LinkLocalGID([6]byte(info.hw)))
	var bo bpf.Options
	switch o.XDPMode {
	case "", "auto":
	case "native":
		bo.Mode = bpf.ModeNative
	case "generic":
		bo.Mode = bpf.ModeGeneric
	default:
		dev.Close()
		return nil, nil, fmt.Errorf("AF_XDP: unknown XDP mode %q (want native or generic)", o.XDPMode)
	}
	prog, err := bpf.Attach(info.name, ips, dev.FDs(), &bo)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	dev.SetXDPMode(prog.Mode().String())
	l, err := newMultiQueue(dev.Sockets)
	if err != nil {
		prog.Close()
		dev.Close()
		return nil, nil, err
	}
	info.xdp = prog
	return l, []func() error{prog.Close}, nil
}

// multiQueue presents the AF_XDP sockets of several rx queues as one Link:
// Receive drains every socket in turn, transmit buffers come from and go
// out through the first socket, and Wait polls all of them. With one socket
// it is that socket.
type multiQueue struct {
	socks []*xsk.Socket
	next  int // socket Receive starts with

	efd     int
	pfds    []unix.PollFd
	ts      unix.Timespec
	one     [8]byte
	drain   [8]byte
	mu      sync.RWMutex // Close waits for Wait
	closed  atomic.Bool
	closeMu sync.Once
}

func newMultiQueue(socks []*xsk.Socket) (link.Link, error) {
	if len(socks) == 0 {
		return nil, errors.New("AF_XDP: no sockets")
	}
	if len(socks) == 1 {
		return socks[0], nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	m := &multiQueue{socks: socks, efd: efd}
	m.one[0] = 1
	for _, s := range socks {
		m.pfds = append(m.pfds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	m.pfds = append(m.pfds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
	return m, nil
}

func (m *multiQueue) Receive(frames [][]byte) (int, error) {
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

func (m *multiQueue) Alloc(bufs [][]byte) int    { return m.socks[0].Alloc(bufs) }
func (m *multiQueue) Send(frames [][]byte) error { return m.socks[0].Send(frames) }
func (m *multiQueue) Free(bufs [][]byte)         { m.socks[0].Free(bufs) }
func (m *multiQueue) Props() link.Props          { return m.socks[0].Props() }

// Wait lets every socket kick its pending transmissions (a zero-timeout
// Wait), then polls all sockets and the wake eventfd.
func (m *multiQueue) Wait(timeout time.Duration) error {
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
	if m.socks[0].TxRefused() && (timeout < 0 || timeout > xsk.TxRetryWait) {
		timeout = xsk.TxRetryWait // see xsk.TxRetryWait
	}
	var ts *unix.Timespec
	if timeout >= 0 {
		m.ts = unix.NsecToTimespec(int64(timeout))
		ts = &m.ts
	}
	for i := range m.pfds {
		m.pfds[i].Revents = 0
	}
	_, err := unix.Ppoll(m.pfds, ts, nil)
	if m.pfds[len(m.pfds)-1].Revents&unix.POLLIN != 0 {
		unix.Read(m.efd, m.drain[:])
	}
	if m.closed.Load() {
		return link.ErrClosed
	}
	if err != nil && err != unix.EINTR {
		return os.NewSyscallError("ppoll", err)
	}
	return nil
}

// Nap lets every socket kick its pending transmissions, then sleeps on the
// wake eventfd alone (link.Napper).
func (m *multiQueue) Nap(timeout time.Duration) error {
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
	if m.socks[0].TxRefused() && (timeout < 0 || timeout > xsk.TxRetryWait) {
		timeout = xsk.TxRetryWait
	}
	var ts *unix.Timespec
	if timeout >= 0 {
		m.ts = unix.NsecToTimespec(int64(timeout))
		ts = &m.ts
	}
	efd := m.pfds[len(m.pfds)-1:]
	efd[0].Revents = 0
	_, err := unix.Ppoll(efd, ts, nil)
	if efd[0].Revents&unix.POLLIN != 0 {
		unix.Read(m.efd, m.drain[:])
	}
	if m.closed.Load() {
		return link.ErrClosed
	}
	if err != nil && err != unix.EINTR {
		return os.NewSyscallError("ppoll", err)
	}
	return nil
}

func (m *multiQueue) Wake() {
	if !m.closed.Load() {
		unix.Write(m.efd, m.one[:])
	}
}

func (m *multiQueue) Close() error {
	err := link.ErrClosed
	m.closeMu.Do(func() {
		m.closed.Store(true)
		unix.Write(m.efd, m.one[:])
		m.mu.Lock()
		var errs []error
		for _, s := range m.socks {
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
