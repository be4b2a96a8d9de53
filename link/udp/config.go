package udp

import (
	"log/slog"
	"net/netip"
)

// Port is the RoCEv2 UDP port.
const Port = 4791

// Defaults for the zero values of Config.
const (
	DefaultBatch        = 64
	DefaultTxBuffers    = 256
	DefaultSocketBuffer = 4 << 20
	// MaxAutoMTU caps the MTU taken from the interface (loopback has 65536).
	MaxAutoMTU = 9000
)

// Config describes a UDP link. The zero value binds all addresses on port
// 4791.
type Config struct {
	// Addr is the local address to bind. The zero value or an unspecified
	// address binds all addresses, IPv4 and IPv6 (dual-stack socket).
	Addr netip.Addr
	// Device, when set, binds the socket to that network interface
	// (SO_BINDTODEVICE): it receives only what arrives there and sends only
	// through it, so processes on two interfaces of one namespace can each
	// have the port on all addresses. roce.Open sets it.
	Device string
	// Port is the local UDP port: 0 means 4791, -1 any free port (tests).
	Port int
	// RemotePort is the port frames are sent to; 0 means the local port.
	RemotePort uint16
	// MTU is the L3 MTU. 0: the MTU of the interface holding Addr, at most
	// MaxAutoMTU, or 1500 when Addr is unspecified.
	MTU int
	// Batch is the most frames moved per sendmmsg or recvmmsg call (and per
	// Receive call). 0 means DefaultBatch.
	Batch int
	// TxBuffers is the number of transmit buffers (what Alloc hands out).
	// 0 means DefaultTxBuffers.
	TxBuffers int
	// SocketBuffer is the SO_SNDBUF and SO_RCVBUF size asked for (with
	// CAP_NET_ADMIN beyond net.core.[rw]mem_max). 0 means
	// DefaultSocketBuffer.
	SocketBuffer int
	// NoGSO turns off segmentation offload: by default Send hands runs of
	// equal-sized frames to the kernel as one UDP_SEGMENT message each, and
	// the socket receives with UDP_GRO (coalesced datagrams, split by their
	// segment size). With NoGSO every frame is one datagram both ways.
	NoGSO bool
	// Logger hears, at info level and once, why GSO is off when it was
	// asked for (the device lacks transmit checksum offload, or the kernel
	// refused it). nil means slog.Default().
	Logger *slog.Logger
}

// Stats counts what a Link did. Drops are counted, not reported per frame.
type Stats struct {
	RxFrames        uint64 // frames returned by Receive
	RxTruncated     uint64 // datagrams larger than the receive buffer (MTU), dropped
	RxInvalid       uint64 // datagrams without a usable address, dropped
	RxIPIDRecovered uint64 // IPv4 frames whose hidden IP ID was recovered from the ICRC (non-zero)
	TxFrames        uint64 // datagrams accepted by the kernel
	TxDropped       uint64 // frames dropped because the socket buffer was full (EAGAIN)
	TxErrors        uint64 // frames the kernel refused (e.g. EMSGSIZE, ENETUNREACH)
	TxInvalid       uint64 // frames that are not Ethernet/IP/UDP, or not from Alloc
	TxGSOSends      uint64 // UDP_SEGMENT messages of two or more frames accepted by the kernel
	RxGROCoalesced  uint64 // received messages that held two or more datagrams (UDP_GRO)
	// RxGROCopied counts datagrams of UDP_GRO messages that did not land in
	// a frame slot of their own and were copied into one (gro_linux.go).
	RxGROCopied uint64
}
