package xsk

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: in copy mode the kernel puts
// received frames this far into a chunk.
const xdpPacketHeadroom = 256

// Socket is one AF_XDP socket bound to one rx queue, with its own UMEM. It
// implements link.Link.
type Socket struct {
	fd, efd  int
	ifname   string
	ifindex  int
	queue    int
	hwaddr   net.HardwareAddr
	mtu      int
	zeroCopy bool
	sg       bool
	budget   bool // XDP_MAX_TX_SKB_BUDGET was raised
	wakeup   bool // XDP_USE_NEED_WAKEUP in effect
	name     atomic.Pointer[string]

	umem      []byte
	umemBase  uintptr
	chunk     uint64
	rxRoom    int    // bytes a single rx chunk can hold
	txBase    uint64 // UMEM offset of the first TX slot
	slotBytes uint64 // chunks per TX slot × chunk
	maxFrame  int

	fill, comp, rx, tx ring

	// txMu guards the transmit side (txFree, the TX and completion rings'
	// private indexes): Alloc, Send and Free may be called from several
	// goroutines and beside a Wait that kicks pending frames.
	txMu    sync.Mutex
	txFree  []uint64 // free TX slot addresses (a stack)
	rxHeld  []uint64 // chunks of the frames returned by the last Receive
	scratch [][]byte // reassembly buffers for multi-buffer frames
	pollFDs [2]unix.PollFd
	ts      unix.Timespec
	one     [8]byte
	drain   [8]byte
	maxRx   int // longest frame received (MTU+22); longer multi-buffer frames are dropped
	// Multi-buffer frames received: dropped as longer than maxRx, joined in
	// place in the UMEM, copied into a reassembly buffer.
	rxErrors, rxJoined, rxCopied atomic.Uint64
	// Waits shortened to TxRetryWait because the kernel refused frames.
	txRetries atomic.Uint64

	mu     sync.RWMutex // RLock: any operation; Lock: Close
	closed atomic.Bool
}

var _ link.Link = (*Socket)(nil)

// OpenQueue opens one AF_XDP socket on rx queue q of the interface. cfg may be
// nil.
func OpenQueue(ifname string, q int, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	if c.ChunkSize < 2048 || c.ChunkSize > 4096 || c.ChunkSize&(c.ChunkSize-1) != 0 {
		return nil, fmt.Errorf("xsk: open %s queue %d: chunk size %d not a power of two in 2048..4096", ifname, q, c.ChunkSize)
	}
	if q < 0 {
		return nil, fmt.Errorf("xsk: open %s: negative queue %d", ifname, q)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("xsk: open: %w", err)
	}
	mtu := c.MTU
	if mtu == 0 {
		mtu = ifi.MTU
	}
	s := &Socket{fd: -1, efd: -1, ifname: ifname, ifindex: ifi.Index, queue: q, hwaddr: ifi.HardwareAddr, mtu: mtu, chunk: uint64(c.ChunkSize)}
	if err := s.open(&c); err != nil {
		s.release()
		return nil, fmt.Errorf("xsk: open %s queue %d: %w", ifname, q, err)
	}
	return s, nil
}

func (s *Socket) open(c *Config) error {
	maxLen := s.mtu + 18 + 4 // Ethernet header, FCS-less, one VLAN tag of slack
	s.rxRoom = c.ChunkSize - xdpPacketHeadroom
	s.sg = c.MultiBuffer || maxLen > s.rxRoom
	k := (maxLen + c.ChunkSize - 1) / c.ChunkSize
	s.slotBytes = uint64(k) * s.chunk
	s.maxFrame = int(s.slotBytes)
	if k > 1 && !s.sg {
		s.sg = true
	}
	if c.RxChunks == 0 {
		c.RxChunks = 2048
		if s.sg {
			c.RxChunks = 4096
		}
	}
	txSlots := c.TxChunks / k
	if txSlots < 1 {
		return fmt.Errorf("%d tx chunks cannot hold one %d-byte frame", c.TxChunks, maxLen)
	}

	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return permHint(os.NewSyscallError("socket(AF_XDP)", err))
	}
	s.fd = fd
	if s.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return os.NewSyscallError("eventfd", err)
	}

	size := (c.RxChunks + c.TxChunks) * c.ChunkSize
	s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return os.NewSyscallError("mmap(umem)", err)
	}
	s.umemBase = uintptr(unsafe.Pointer(&s.umem[0]))
	reg := unix.XDPUmemReg{Addr: uint64(s.umemBase), Len: uint64(size), Size: uint32(c.ChunkSize)}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return permHint(os.NewSyscallError("setsockopt(XDP_UMEM_REG)", err))
	}
	fillN, compN := uint32(c.RxChunks), uint32(pow2(c.TxChunks))
	rxN, txN := uint32(c.RxChunks), uint32(pow2(c.TxChunks))
	for _, o := range []struct {
		opt int
		n   uint32
	}{{unix.XDP_UMEM_FILL_RING, fillN}, {unix.XDP_UMEM_COMPLETION_RING, compN}, {unix.XDP_RX_RING, rxN}, {unix.XDP_TX_RING, txN}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(o.n)); err != nil {
			return os.NewSyscallError("setsockopt(ring size)", err)
		}
	}
	var off unix.XDPMmapOffsets
	optlen := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&optlen)), 0); e != 0 {
		return os.NewSyscallError("getsockopt(XDP_MMAP_OFFSETS)", e)
	}
	if s.fill, err = mapRing(fd, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, fillN, 8); err != nil {
		return os.NewSyscallError("mmap(fill ring)", err)
	}
	if s.comp, err = mapRing(fd, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, compN, 8); err != nil {
		return os.NewSyscallError("mmap(completion ring)", err)
	}
	if s.rx, err = mapRing(fd, off.Rx, unix.XDP_PGOFF_RX_RING, rxN, unsafe.Sizeof(unix.XDPDesc{})); err != nil {
		return os.NewSyscallError("mmap(rx ring)", err)
	}
	if s.tx, err = mapRing(fd, off.Tx, unix.XDP_PGOFF_TX_RING, txN, unsafe.Sizeof(unix.XDPDesc{})); err != nil {
		return os.NewSyscallError("mmap(tx ring)", err)
	}
	// Let one sendto push the whole TX ring instead of 32 frames (Linux 6.17+).
	if err := unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(txN)); err == nil {
		s.budget = true
	}

	// Every rx chunk goes to the fill ring.
	for i := range uint64(c.RxChunks) {
		*s.fill.addr(s.fill.prod) = i * s.chunk
		s.fill.prod++
	}
	s.fill.submit()
	s.txBase = uint64(c.RxChunks) * s.chunk
	s.txFree = make([]uint64, 0, txSlots)
	for i := txSlots - 1; i >= 0; i-- {
		s.txFree = append(s.txFree, s.txBase+uint64(i)*s.slotBytes)
	}
	s.rxHeld = make([]uint64, 0, c.RxChunks)
	s.maxRx = maxLen
	if s.sg {
		// Reassembly buffers, for the multi-buffer frames that cannot be
		// joined in place (rx_linux.go, join).
		s.scratch = make([][]byte, 64)
		for i := range s.scratch {
			s.scratch[i] = make([]byte, maxLen)
		}
	}

	var flags uint16
	switch c.Bind {
	case BindCopy:
		flags |= unix.XDP_COPY
	case BindZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	if !c.NoNeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if s.sg {
		flags |= unix.XDP_USE_SG
	}
	if err := bindRetry(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}); err != nil {
		switch {
		case s.sg && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)):
			return fmt.Errorf("bind with XDP_USE_SG (multi-buffer, needed for %d-byte frames): %w: %w", maxLen, link.ErrNotSupported, err)
		case c.Bind == BindZeroCopy && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)):
			return fmt.Errorf("zero-copy bind: %w: %w", link.ErrNotSupported, err)
		}
		return err
	}
	s.wakeup = !c.NoNeedWakeup
	var opts struct{ flags uint32 }
	optlen = uint32(unsafe.Sizeof(opts))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_OPTIONS,
		uintptr(unsafe.Pointer(&opts)), uintptr(unsafe.Pointer(&optlen)), 0); e == 0 {
		s.zeroCopy = opts.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
	}
	s.pollFDs = [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(s.efd), Events: unix.POLLIN}}
	s.one[0] = 1 // eventfd counter increment, host byte order (little endian here)
	if isBigEndian() {
		s.one = [8]byte{7: 1}
	}
	return nil
}

func isBigEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 0
}

// bindRetry binds, retrying for up to two seconds on EBUSY: the kernel
// releases a closed socket's claim on a queue a moment after close(2).
func bindRetry(fd int, sa *unix.SockaddrXDP) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Bind(fd, sa)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("%w (another AF_XDP socket holds the queue)", os.NewSyscallError("bind(AF_XDP)", err))
			}
			return permHint(os.NewSyscallError("bind(AF_XDP)", err))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

func permHint(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w (needs CAP_NET_RAW and CAP_NET_ADMIN, or root)", err)
	}
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOBUFS) {
		return fmt.Errorf("%w (UMEM could not be pinned: raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK)", err)
	}
	return err
}

// release frees whatever open managed to set up.
func (s *Socket) release() {
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		r.unmap()
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.efd >= 0 {
		unix.Close(s.efd)
		s.efd = -1
	}
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
}

// FD is the socket's file descriptor (for the XSKMAP).
func (s *Socket) FD() int { return s.fd }

// Queue is the rx queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// ZeroCopy reports whether the socket runs in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// MultiBuffer reports whether the socket was bound with XDP_USE_SG.
func (s *Socket) MultiBuffer() bool { return s.sg }

// TxBudgetRaised reports whether XDP_MAX_TX_SKB_BUDGET was raised to the TX
// ring size (Linux 6.17 and later).
func (s *Socket) TxBudgetRaised() bool { return s.budget }

// SetXDPMode records the steering program's mode ("native", "generic") for
// Props().Name. Safe for concurrent use.
func (s *Socket) SetXDPMode(mode string) {
	n := "AF_XDP (" + mode + ")"
	s.name.Store(&n)
}

// Props describes the socket's link.
func (s *Socket) Props() link.Props {
	name := "AF_XDP"
	if n := s.name.Load(); n != nil {
		name = *n
	}
	return link.Props{Name: name, MTU: s.mtu, MaxFrame: s.maxFrame, HWAddr: s.hwaddr}
}

// Stats are the kernel's XDP_STATISTICS for the socket plus the frames the
// socket itself dropped.
type Stats struct {
	unix.XDPStatistics
	// RxTooLong counts received multi-buffer frames dropped because they
	// exceeded the reassembly room (MTU+22 bytes).
	RxTooLong uint64
	// RxJoined counts multi-buffer frames joined in place in the UMEM (each
	// fragment moved onto the end of the one before); RxCopied those copied
	// into a reassembly buffer because their chunks were not adjacent.
	RxJoined, RxCopied uint64
	// TxRetryWaits counts the Waits shortened to TxRetryWait because the
	// kernel had left frames in the TX ring (device busy).
	TxRetryWaits uint64
}

// Stats reads the socket's counters. Not for the per-packet path.
func (s *Socket) Stats() (Stats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return Stats{}, fmt.Errorf("xsk: stats: %w", link.ErrClosed)
	}
	var st Stats
	optlen := uint32(unsafe.Sizeof(st.XDPStatistics))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st.XDPStatistics)), uintptr(unsafe.Pointer(&optlen)), 0); e != 0 {
		return st, fmt.Errorf("xsk: stats: %w", os.NewSyscallError("getsockopt(XDP_STATISTICS)", e))
	}
	st.RxTooLong = s.rxErrors.Load()
	st.RxJoined, st.RxCopied = s.rxJoined.Load(), s.rxCopied.Load()
	st.TxRetryWaits = s.txRetries.Load()
	return st, nil
}
