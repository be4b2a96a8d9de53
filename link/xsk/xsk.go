package xsk

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
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

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: in copy mode the kernel puts
// received frames this far into a chunk.
const xdpPacketHeadroom = 256

// BindMode chooses between zero-copy and copy mode.
type BindMode int

const (
	// BindAuto lets the kernel use zero-copy where the driver supports it and
	// copy mode otherwise (veth, tap: copy only).
	BindAuto BindMode = iota
	// BindCopy forces copy mode (XDP_COPY).
	BindCopy
	// BindZeroCopy requires zero-copy (XDP_ZEROCOPY); Open fails without it.
	BindZeroCopy
)

// Config configures the sockets. The zero value (or a nil *Config) gives
// sensible defaults.
type Config struct {
	// Queues lists the rx queues to open a socket on; nil means every queue
	// of the interface.
	Queues []int
	// ChunkSize is the UMEM chunk size, a power of two in 2048..4096 (the
	// kernel refuses larger aligned chunks); 0 means 4096.
	ChunkSize int
	// RxChunks and TxChunks are the UMEM chunks for receiving and sending, per
	// socket; 0 means 2048 each, except RxChunks with multi-buffer: 4096,
	// since a received frame over one chunk takes two or more (at MTU 9000 a
	// PMTU 4096 RoCE frame takes two, and 1024 of them in flight — the
	// default RoCE send window — overflowed a 2048-entry fill ring: the kernel
	// dropped frames and go-back-N resent windows). Rounded up to powers of two.
	RxChunks, TxChunks int
	// MTU is the L3 MTU frames are sized for; 0 means the interface's MTU.
	MTU int
	// Bind chooses zero-copy or copy mode.
	Bind BindMode
	// NoNeedWakeup turns off XDP_USE_NEED_WAKEUP (then every Send makes a
	// syscall).
	NoNeedWakeup bool
	// MultiBuffer forces XDP_USE_SG even when frames fit a chunk. It is
	// turned on anyway when MTU+18 exceeds the receive room of a chunk.
	MultiBuffer bool
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.ChunkSize == 0 {
		d.ChunkSize = 4096
	}
	if d.TxChunks == 0 {
		d.TxChunks = 2048
	}
	if d.RxChunks != 0 { // 0: chosen by open, which knows whether frames span chunks
		d.RxChunks = pow2(d.RxChunks)
	}
	d.TxChunks = pow2(d.TxChunks)
	return d
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// Device is the set of sockets opened on one interface, one per rx queue.
type Device struct {
	Ifname  string
	Sockets []*Socket // in the order of Config.Queues (ascending queue ids by default)
}

// Open opens an AF_XDP socket on each rx queue of the interface (or on
// cfg.Queues). The sockets receive nothing until an XDP program redirects
// frames to them (package bpf: pass FDs to bpf.Attach). cfg may be nil.
func Open(ifname string, cfg *Config) (*Device, error) {
	c := cfg.withDefaults()
	queues := c.Queues
	if queues == nil {
		n, err := QueueCount(ifname)
		if err != nil {
			return nil, err
		}
		for q := range n {
			queues = append(queues, q)
		}
	}
	d := &Device{Ifname: ifname}
	for _, q := range queues {
		s, err := OpenQueue(ifname, q, &c)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.Sockets = append(d.Sockets, s)
	}
	return d, nil
}

// FDs returns the socket file descriptors indexed by queue id, -1 where the
// device has no socket (the form bpf.Attach takes).
func (d *Device) FDs() []int {
	n := 0
	for _, s := range d.Sockets {
		n = max(n, s.queue+1)
	}
	fds := make([]int, n)
	for i := range fds {
		fds[i] = -1
	}
	for _, s := range d.Sockets {
		fds[s.queue] = s.fd
	}
	return fds
}

// SetXDPMode records the mode of the steering program ("native" or
// "generic") for Props().Name on every socket.
func (d *Device) SetXDPMode(mode string) {
	for _, s := range d.Sockets {
		s.SetXDPMode(mode)
	}
}

// Close closes every socket (sockets already closed are skipped).
func (d *Device) Close() error {
	var errs []error
	for _, s := range d.Sockets {
		if err := s.Close(); err != nil && !errors.Is(err, link.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

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

	txFree   []uint64 // free TX slot addresses (a stack)
	rxHeld   []uint64 // chunks of the frames returned by the last Receive
	scratch  [][]byte // reassembly buffers for multi-buffer frames
	pollFDs  [2]unix.PollFd
	ts       unix.Timespec
	one      [8]byte
	drain    [8]byte
	rxErrors uint64 // frames dropped: longer than MaxFrame, or out of scratch
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
	if s.sg {
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
	st.RxTooLong = s.rxErrors
	st.TxRetryWaits = s.txRetries.Load()
	return st, nil
}

// Receive stores up to len(frames) received frames in frames and returns how
// many, without blocking. Frames alias the UMEM (or, for multi-buffer frames,
// a reassembly buffer) and stay valid until the next Receive call; Receive
// returns the previous batch's chunks to the fill ring first.
func (s *Socket) Receive(frames [][]byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	s.recycleRx()
	avail := s.rx.avail()
	if avail == 0 || len(frames) == 0 {
		s.kickFill()
		return 0, nil
	}
	n, sc := 0, 0
	i, end := s.rx.cons, s.rx.cons+avail
	done := i // descriptors consumed up to the end of the last whole frame
	for i != end && n < len(frames) {
		d := s.rx.desc(i)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			// A whole frame in one chunk: alias it.
			s.rxHeld = append(s.rxHeld, d.Addr)
			frames[n] = s.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
			n++
			i++
			done = i
			continue
		}
		// A multi-buffer frame: find its last descriptor, then copy.
		j, total := i, 0
		for j != end {
			dj := s.rx.desc(j)
			total += int(dj.Len)
			j++
			if dj.Options&unix.XDP_PKT_CONTD == 0 {
				break
			}
		}
		if s.rx.desc(j-1).Options&unix.XDP_PKT_CONTD != 0 {
			break // the rest of the frame is not in the ring yet
		}
		if sc == len(s.scratch) {
			break // out of reassembly buffers: the frame waits for the next call
		}
		var dst []byte
		if total <= len(s.scratch[sc]) {
			dst = s.scratch[sc][:total]
			sc++
		}
		off := 0
		for ; i != j; i++ {
			di := s.rx.desc(i)
			s.rxHeld = append(s.rxHeld, di.Addr)
			if dst != nil {
				off += copy(dst[off:], s.umem[di.Addr:di.Addr+uint64(di.Len)])
			}
		}
		done = i
		if dst == nil {
			s.rxErrors++
			continue
		}
		frames[n] = dst
		n++
	}
	s.rx.cons = done
	s.rx.release()
	return n, nil
}

// recycleRx gives the chunks of the last batch back to the fill ring.
func (s *Socket) recycleRx() {
	if len(s.rxHeld) == 0 {
		return
	}
	free := s.fill.free(uint32(len(s.rxHeld)))
	k := min(int(free), len(s.rxHeld))
	for _, a := range s.rxHeld[:k] {
		*s.fill.addr(s.fill.prod) = a &^ (s.chunk - 1)
		s.fill.prod++
	}
	s.fill.submit()
	s.rxHeld = s.rxHeld[:copy(s.rxHeld, s.rxHeld[k:])]
	s.kickFill()
}

// kickFill wakes the driver when it sleeps waiting for fill-ring entries.
func (s *Socket) kickFill() {
	if s.wakeup && s.fill.needWakeup() {
		unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// Alloc stores up to len(bufs) empty transmit buffers (len == MaxFrame) in
// bufs and returns how many; 0 when every buffer is in flight.
func (s *Socket) Alloc(bufs [][]byte) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0
	}
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

// txStuckTimeout returns the timeout of a Wait that kicked the TX ring:
// timeout, or TxRetryWait if the kernel left frames in the ring (copy mode).
func (s *Socket) txStuckTimeout(timeout time.Duration) time.Duration {
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
// this for its own socket). Call it from the goroutine that sends.
func (s *Socket) TxRefused() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
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
	for _, b := range bufs {
		if a, ok := s.slotOf(b); ok {
			s.txFree = append(s.txFree, a)
		}
	}
}

// Wait blocks until a frame may be received, Wake is called, or the timeout
// passes (negative: no limit). It returns ErrClosed after Close.
func (s *Socket) Wait(timeout time.Duration) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	if s.tx.pending() {
		s.kickTx()
		timeout = s.txStuckTimeout(timeout)
	}
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
	for i := range fds {
		fds[i].Revents = 0
	}
	_, err := unix.Ppoll(fds, ts, nil)
	if s.pollFDs[1].Revents&unix.POLLIN != 0 {
		unix.Read(s.efd, s.drain[:])
	}
	if s.closed.Load() {
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
	if s.tx.pending() {
		s.kickTx()
		timeout = s.txStuckTimeout(timeout)
	}
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
