package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// NewPort creates a port: a sealed memfd holding the rings and frame areas,
// two eventfds and a liveness socket pair. It returns the creator's end and
// the descriptors for the attaching end, to be passed with SendPort (or to
// Attach in this process). The creator must not keep its copy of them once
// passed (SendPort closes it): the peer's death is seen when the last copy
// of its liveness socket closes.
func NewPort(cfg Config) (*Link, *PortFds, error) {
	l, p, err := newPort(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: new port: %w", err)
	}
	return l, p, nil
}

func newPort(cfg Config) (_ *Link, _ *PortFds, err error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, nil, err
	}
	lay, err := newLayout(c)
	if err != nil {
		return nil, nil, err
	}
	// Everything opened so far is closed on failure.
	var opened []int
	defer func() {
		if err != nil {
			for _, fd := range opened {
				unix.Close(fd)
			}
		}
	}()
	mfd, err := unix.MemfdCreate("xdproce-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	opened = append(opened, mfd)
	if err := unix.Ftruncate(mfd, int64(lay.total)); err != nil {
		return nil, nil, fmt.Errorf("ftruncate memfd to %d bytes: %w", lay.total, err)
	}
	// A peer that shrank the file would make our accesses fault (SIGBUS).
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, nil, fmt.Errorf("seal memfd: %w", err)
	}
	var fds [5]int // down, up, live (ours, theirs), and dups of down and up for the peer
	for i := range 2 {
		if fds[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return nil, nil, fmt.Errorf("eventfd: %w", err)
		}
		opened = append(opened, fds[i])
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("liveness socketpair: %w", err)
	}
	opened = append(opened, sp[0], sp[1])
	var dup [2]int
	for i := range 2 {
		if dup[i], err = unix.FcntlInt(uintptr(fds[i]), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return nil, nil, fmt.Errorf("dup eventfd: %w", err)
		}
		opened = append(opened, dup[i])
	}
	mem, err := unix.Mmap(mfd, 0, lay.total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", lay.total, err)
	}
	lay.putHeader(mem)
	l := newLink(mem, &lay, 0, fds[1], fds[0], sp[0])
	return l, &PortFds{Mem: mfd, Down: dup[0], Up: dup[1], Live: sp[1]}, nil
}

// Attach maps a port from the descriptors of its attaching end (from
// ReceivePort, or NewPort in this process) and returns that end. It takes
// ownership of p's descriptors, on failure too, and sets them to -1. The
// memfd must carry the seals NewPort puts on it and a header that matches
// its size; nothing else in the shared memory is trusted.
func Attach(p *PortFds) (*Link, error) {
	l, err := attach(p)
	p.Close()
	if err != nil {
		return nil, fmt.Errorf("shm: attach: %w", err)
	}
	return l, nil
}

func attach(p *PortFds) (*Link, error) {
	for _, fd := range p.list() {
		if *fd < 0 {
			return nil, errors.New("missing descriptor")
		}
	}
	seals, err := unix.FcntlInt(uintptr(p.Mem), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("not a sealable memfd: %w", err)
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return nil, fmt.Errorf("memfd seals %#x lack shrink and grow", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(p.Mem, &st); err != nil {
		return nil, fmt.Errorf("fstat memfd: %w", err)
	}
	if st.Size < pageSize || st.Size > maxTotal {
		return nil, fmt.Errorf("memfd of %d bytes not in %d..%d", st.Size, pageSize, maxTotal)
	}
	mem, err := unix.Mmap(p.Mem, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", st.Size, err)
	}
	var h [headerSize]byte
	copy(h[:], mem)
	lay, err := parseHeader(&h, st.Size)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	l := newLink(mem, &lay, 1, p.Down, p.Up, p.Live)
	p.Down, p.Up, p.Live = -1, -1, -1 // now the link's
	return l, nil
}

// Close closes the descriptors still held (those not passed or attached).
func (p *PortFds) Close() error {
	for _, fd := range p.list() {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	return nil
}
