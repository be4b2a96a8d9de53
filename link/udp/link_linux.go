package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/internal/bufpool"
)

const (
	// headroom in front of a received payload: Ethernet + IPv6 + UDP.
	headroom = 14 + 40 + 8
	// cmsgRoom is the control buffer of one message: on transmit
	// IPV6_PKTINFO, UDP_SEGMENT and IP_TOS; on receive (an IPv4 datagram on
	// a dual-stack socket) IPV6_PKTINFO, IP_PKTINFO, IP_TOS and UDP_GRO.
	cmsgRoom = 128
)

// A Link is a RoCEv2 link over a kernel UDP socket. It implements link.Link.
type Link struct {
	props   link.Props
	v6      bool // AF_INET6 socket
	pktinfo bool // bound to all addresses: send the source address with each datagram
	local   netip.Addr
	rport   uint16
	batch   int

	mu     sync.RWMutex // held for reading while the fds are used, for writing by Close
	closed atomic.Bool
	waking atomic.Bool // a Wake wrote to efd and no Wait has consumed it yet
	fd     int
	efd    int // eventfd for Wake

	// Receive side.
	rxSlots [][]byte
	rxHdrs  []mmsghdr
	rxIov   []unix.Iovec
	rxNames []unix.RawSockaddrInet6
	rxCtl   []byte
	rxMax   int // payload bytes a slot takes
	// rxChecked[k]: frame k of the last Receive had its ICRC verified by
	// rebuild (ICRCChecked); checked is rebuild's answer for the frame it
	// just made.
	rxChecked []bool
	checked   bool

	// Transmit side.
	pool    bufpool.Pool
	txHdrs  []mmsghdr
	txIov   []unix.Iovec
	txNames []unix.RawSockaddrInet6 // AF_INET sockets use the first 16 bytes as sockaddr_in
	txCtl   []byte

	// Segmentation offload (gso_linux.go, gro_linux.go).
	gso    atomic.Bool // Send groups frames into UDP_SEGMENT messages
	gro    bool        // the socket receives with UDP_GRO
	log    *slog.Logger
	gsoTx  gsoState
	groBuf [][]byte     // coalesced datagrams, one region (groRegion) per message
	groIov []unix.Iovec // groIovs+1 per message: the region's slots and tail
	// groPredict is the slot size the next recvmmsg lays regions out in:
	// the segment size of the last coalesced message of three segments or
	// more (gro_linux.go). groLaidS, groLaidK and
	// groLaidN are the layout of the first groLaidN messages now (slot
	// size, slots): what the messages of the last recvmmsg landed in.
	groPredict                   int
	groLaidS, groLaidK, groLaidN int
	pend                         pending // segments received and not yet returned

	pfd     [2]unix.PollFd
	ts      unix.Timespec
	efdBuf  [8]byte
	rxStats struct{ frames, truncated, invalid, idRecovered, coalesced, groCopied atomic.Uint64 }
	txStats struct{ frames, dropped, errors, invalid, gso atomic.Uint64 }
}

var _ link.Link = (*Link)(nil)

// mmsghdr is struct mmsghdr.
type mmsghdr = unix.Mmsghdr

// Open binds a UDP socket as described by cfg.
func Open(cfg Config) (*Link, error) {
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.TxBuffers == 0 {
		cfg.TxBuffers = DefaultTxBuffers
	}
	if cfg.SocketBuffer == 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	switch {
	case cfg.Port < -1 || cfg.Port > 65535:
		return nil, fmt.Errorf("udp: open: port %d not in -1..65535", cfg.Port)
	case cfg.Batch < 1 || cfg.Batch > 1024:
		return nil, fmt.Errorf("udp: open: batch %d not in 1..1024", cfg.Batch)
	case cfg.TxBuffers < 1 || cfg.TxBuffers > 1<<16:
		return nil, fmt.Errorf("udp: open: %d transmit buffers not in 1..65536", cfg.TxBuffers)
	case cfg.MTU != 0 && (cfg.MTU < 576 || cfg.MTU > 65000):
		return nil, fmt.Errorf("udp: open: MTU %d not in 576..65000", cfg.MTU)
	case cfg.SocketBuffer < 0:
		return nil, fmt.Errorf("udp: open: negative socket buffer %d", cfg.SocketBuffer)
	}
	addr := cfg.Addr.Unmap()
	wildcard := !addr.IsValid() || addr.IsUnspecified()
	if addr.Is6() && (addr.IsLinkLocalUnicast() || addr.Zone() != "") {
		return nil, fmt.Errorf("udp: open: link-local address %v is not supported: bind a global address or all addresses", addr)
	}
	port := cfg.Port
	switch port {
	case 0:
		port = Port
	case -1:
		port = 0
	}
	mtu := cfg.MTU
	if mtu == 0 {
		m, err := interfaceMTU(addr, wildcard)
		if err != nil {
			return nil, err
		}
		mtu = m
	}

	l := &Link{v6: wildcard || addr.Is6(), pktinfo: wildcard, local: addr, batch: cfg.Batch, fd: -1, efd: -1, log: cfg.Logger}
	if l.log == nil {
		l.log = slog.Default()
	}
	if err := l.socket(addr, port, cfg.SocketBuffer, cfg.Device); err != nil {
		l.closeFDs()
		return nil, err
	}
	if !cfg.NoGSO {
		l.enableOffload()
	}
	bound, err := unix.Getsockname(l.fd)
	if err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("udp: open: %w", os.NewSyscallError("getsockname", err))
	}
	switch sa := bound.(type) {
	case *unix.SockaddrInet4:
		port = sa.Port
	case *unix.SockaddrInet6:
		port = sa.Port
	}
	l.rport = cfg.RemotePort
	if l.rport == 0 {
		l.rport = uint16(port)
	}
	l.props = link.Props{
		Name:             "UDP",
		MTU:              mtu,
		MaxFrame:         mtu + 18,
		SrcPort:          uint16(port),
		SyntheticHeaders: true,
	}
	l.initBuffers(cfg)
	return l, nil
}

func (l *Link) socket(addr netip.Addr, port, bufSize int, device string) error {
	family := unix.AF_INET
	if l.v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("udp: open: %w", os.NewSyscallError("socket", err))
	}
	l.fd = fd
	type opt struct {
		level, name, value int
		what               string
	}
	opts := []opt{
		// DF and no fragmentation: Linux then sends IPv4 ID 0 from an
		// unconnected socket (segment k of a GSO message: k), which the
		// ICRC covers. Never connect(2) this socket: a connected socket
		// takes its IDs from a per-socket counter (inet_id) instead.
		{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
		{unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO"},
		{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"}, // ECN CE (tos_linux.go)
		// A device may send to an IPv4 broadcast address (a group
		// context bound to the subnet broadcast; docs/ooo.md).
		{unix.SOL_SOCKET, unix.SO_BROADCAST, 1, "SO_BROADCAST"},
	}
	if l.v6 {
		opts = append(opts,
			// Dual-stack when bound to all addresses.
			opt{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(!l.pktinfo), "IPV6_V6ONLY"},
			opt{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			opt{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO"},
			opt{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			// RoCEv2 senders (rxe, AF_XDP) send UDP checksum 0, which
			// IPv6 forbids: without this the kernel drops their frames
			// (Udp6InCsumErrors). The ICRC protects the payload.
			opt{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX"},
		)
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("udp: open: setsockopt %s: %w", o.what, os.NewSyscallError("setsockopt", err))
		}
	}
	// Large buffers: beyond rmem_max/wmem_max with CAP_NET_ADMIN, else as
	// much as allowed.
	for _, b := range [...][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if bufSize == 0 {
			break
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, b[0], bufSize) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, b[1], bufSize)
		}
	}
	if device != "" {
		// Unprivileged since Linux 5.7, on a socket not yet bound to a device.
		if err := unix.BindToDevice(fd, device); err != nil {
			return fmt.Errorf("udp: open: bind to device %s: %w", device, os.NewSyscallError("setsockopt SO_BINDTODEVICE", err))
		}
	}
	var sa unix.Sockaddr
	if l.v6 {
		s := &unix.SockaddrInet6{Port: port}
		if addr.IsValid() && !addr.IsUnspecified() {
			s.Addr = addr.As16()
		}
		sa = s
	} else {
		sa = &unix.SockaddrInet4{Port: port, Addr: addr.As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		ap := netip.AddrPortFrom(addr, uint16(port))
		if !addr.IsValid() {
			ap = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port))
		}
		if errors.Is(err, unix.EADDRINUSE) {
			return fmt.Errorf("udp: open: bind %v: %w (is the port taken by another process or by the kernel's rxe? choose another with Config.Port)", ap, os.NewSyscallError("bind", err))
		}
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("udp: open: bind %v: %w (the address is not on any interface)", ap, os.NewSyscallError("bind", err))
		}
		return fmt.Errorf("udp: open: bind %v: %w", ap, os.NewSyscallError("bind", err))
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("udp: open: %w", os.NewSyscallError("eventfd", err))
	}
	l.efd = efd
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// interfaceMTU returns the MTU of the interface holding addr, capped at
// MaxAutoMTU, or 1500 for the wildcard address.
func interfaceMTU(addr netip.Addr, wildcard bool) (int, error) {
	if wildcard {
		return 1500, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, fmt.Errorf("udp: open: list interfaces: %w", err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == addr {
				return min(ifi.MTU, MaxAutoMTU), nil
			}
			// 127.0.0.0/8 is all local on lo, though only 127.0.0.1
			// is listed.
			if ifi.Flags&net.FlagLoopback != 0 && addr.Is4() && ipn.Contains(addr.AsSlice()) {
				return min(ifi.MTU, MaxAutoMTU), nil
			}
		}
	}
	return 0, fmt.Errorf("udp: open: no interface has address %v (set Config.MTU to skip the lookup)", addr)
}

func (l *Link) initBuffers(cfg Config) {
	n := l.batch
	l.rxMax = l.props.MTU - 28 // the largest IPv4 UDP payload
	slot := headroom + l.rxMax
	back := make([]byte, n*slot)
	l.rxSlots = make([][]byte, n)
	l.rxHdrs = make([]mmsghdr, n)
	l.rxIov = make([]unix.Iovec, n)
	l.rxNames = make([]unix.RawSockaddrInet6, n)
	l.rxChecked = make([]bool, n)
	l.rxCtl = make([]byte, n*cmsgRoom)
	for i := range n {
		l.rxSlots[i] = back[i*slot : (i+1)*slot : (i+1)*slot]
		l.rxIov[i].Base = &l.rxSlots[i][headroom]
		h := &l.rxHdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&l.rxNames[i]))
		h.Iov = &l.rxIov[i]
		h.SetIovlen(1)
		h.Control = &l.rxCtl[i*cmsgRoom]
	}
	l.pool.Init(cfg.TxBuffers, l.props.MaxFrame)
	l.txHdrs = make([]mmsghdr, n)
	l.txIov = make([]unix.Iovec, n)
	l.txNames = make([]unix.RawSockaddrInet6, n)
	l.txCtl = make([]byte, n*cmsgRoom)
	nameLen := uint32(unix.SizeofSockaddrInet4)
	if l.v6 {
		nameLen = unix.SizeofSockaddrInet6
	}
	for i := range n {
		h := &l.txHdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&l.txNames[i]))
		h.Namelen = nameLen
		h.Iov = &l.txIov[i]
		h.SetIovlen(1)
		if l.pktinfo {
			// One IPV6_PKTINFO message, filled per frame (prepare
			// sets the length, with the TOS after it).
			c := l.txCtl[i*cmsgRoom:]
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			cm.Level = unix.IPPROTO_IPV6
			cm.Type = unix.IPV6_PKTINFO
			cm.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
		}
	}
	if l.gro {
		back := make([]byte, n*groRegion)
		l.groBuf = make([][]byte, n)
		l.groIov = make([]unix.Iovec, n*(groIovs+1))
		for i := range n {
			l.groBuf[i] = back[i*groRegion : (i+1)*groRegion : (i+1)*groRegion]
		}
		l.groPredict = l.rxMax
	}
	l.gsoTx.init(n, l.pktinfo, nameLen)
	l.pfd[0] = unix.PollFd{Fd: int32(l.fd), Events: unix.POLLIN}
	l.pfd[1] = unix.PollFd{Fd: int32(l.efd), Events: unix.POLLIN}
}

// Props describes the link: Name "UDP", the MTU, MaxFrame = MTU+18, no
// hardware address, SrcPort = the bound port, SyntheticHeaders.
func (l *Link) Props() link.Props { return l.props }

// LocalPort returns the bound UDP port.
func (l *Link) LocalPort() uint16 { return l.props.SrcPort }

// Stats returns the link's counters. Safe for concurrent use.
func (l *Link) Stats() Stats {
	return Stats{
		RxFrames:        l.rxStats.frames.Load(),
		RxTruncated:     l.rxStats.truncated.Load(),
		RxInvalid:       l.rxStats.invalid.Load(),
		RxIPIDRecovered: l.rxStats.idRecovered.Load(),
		TxFrames:        l.txStats.frames.Load(),
		TxDropped:       l.txStats.dropped.Load(),
		TxErrors:        l.txStats.errors.Load(),
		TxInvalid:       l.txStats.invalid.Load(),
		TxGSOSends:      l.txStats.gso.Load(),
		RxGROCoalesced:  l.rxStats.coalesced.Load(),
		RxGROCopied:     l.rxStats.groCopied.Load(),
	}
}
