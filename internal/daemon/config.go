// Package daemon is xdproce daemon: one process owns a network interface's
// link (the XDP program and AF_XDP sockets, or the kernel UDP socket) and
// shares it among local processes, each attached through a link/shm port
// passed over a unix socket (package proto says the conversation).
//
// The daemon is a frame switch: every client runs its own roce engine and
// keeps its queue pairs and memory; the daemon gives each client a range of
// QPNs unique on the device, steers frames by destination QPN (from the
// wire, and between clients of the same daemon: those never reach the
// NIC), and sends the clients' other frames out through its link.
//
// Trust: a client's frames are read from memory it can write at any time,
// so the daemon takes a private copy of each header before it looks at it
// and writes that copy, not the shared bytes, into the frame it forwards.
// A frame whose source address is not one of the interface's, or (UD,
// which names its source QPN in the DETH) whose source QPN is not the
// client's, is dropped and counted. RC and UC packets carry no source QPN:
// one from a client reaches another client's queue pair only when that
// queue pair is registered as connected to a QPN of the sender
// (conn_linux.go).
//
// QP1 is every client's: the daemon steers each RDMA CM MAD to the client
// it is for (cm_linux.go). Multicast groups are joined on the interface for
// the clients that ask, and group frames fan out to every member
// (mcast_linux.go). Clients share memory regions with the daemon, which
// then places RC messages between them memory to memory (mem_linux.go,
// place_linux.go; docs/placement.md). Not here yet (issue 17):
// out-of-order contexts device-wide, daemon-placed atomics.
package daemon

import (
	"log/slog"
	"os"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// Defaults of Config.
const (
	DefaultQPNs       = 4096
	DefaultMaxClients = 64
	DefaultMode       = 0o660
	DefaultMaxShare   = 16 << 30 // Config.MaxShared when 0
)

// Config configures a daemon.
type Config struct {
	// Interface is the network interface to serve (required).
	Interface string
	// Socket is the unix socket clients connect to; "" means
	// proto.DefaultSocket(Interface).
	Socket string
	// Mode is the socket's permission bits (0: DefaultMode); Group, when
	// set, its group (a name or a number).
	Mode  os.FileMode
	Group string
	// Link is the uplink's kind: roce.LinkAuto, LinkXSK or LinkUDP.
	Link roce.LinkKind
	// XDPMode and Queues are passed to the uplink as roce.Options'.
	XDPMode string
	Queues  int
	// QPNs is the number of QPNs each client gets: a power of two,
	// 16..1<<20 (0: DefaultQPNs); it is also the client's limit on queue
	// pairs.
	QPNs int
	// MaxClients bounds the clients served at once (0: DefaultMaxClients).
	MaxClients int
	// MaxMRs is each client's limit on memory regions (0: roce's default).
	// The client enforces it: its memory regions live in its own process.
	MaxMRs int
	// Ring is the size of each port's rings (0: shm.DefaultRing); with the
	// MTU it sets the port's shared memory, the daemon's memory per client.
	Ring int
	// MaxShared bounds the memory each client shares with the daemon for
	// direct placement (0: DefaultMaxShare); the daemon maps it.
	MaxShared int64
	// Log receives the daemon's events (nil: discarded).
	Log *slog.Logger
}

// Stats are the daemon's counters.
type Stats struct {
	WireRx, WireTx uint64
	Switched       uint64
	DropNoOwner    uint64
	DropQP1        uint64 // QP1 frames no client takes and the daemon did not answer
	CMAnswered     uint64 // CM MADs for no client that the daemon answered
	GroupFrames    uint64 // multicast frames delivered to clients (one per client)
	DropWireBad    uint64
	EgressFull     uint64
	WireErrors     uint64
	DropNoNeighbor uint64 // frames from clients without a MAC (another namespace) whose next hop is not resolved yet
	// DropForeignConn counts clients' RC/UC frames to another local
	// client's queue pair not connected to them (conn_linux.go).
	DropForeignConn uint64
	// Direct placement (place_linux.go).
	Placed         uint64 // messages copied between clients' shared regions
	PlacedBytes    uint64 // their bytes
	PlaceFallbacks uint64 // requests sent back to be sent as frames (no local owner, memory not shared)
	PlaceAnswered  uint64 // requests answered without a copy (duplicates, NAKs)
	PlaceBad       uint64 // placement messages refused (malformed, foreign segments or QPNs, stale answers)
	PlaceFailed    uint64 // copies refused after the answer (a region went)
	PlaceGranted   uint64 // of Placed, those the daemon checked and placed on the first hop (grant_linux.go)
	Clients        []ClientStats
}

// ClientStats describe one client.
type ClientStats struct {
	ID              int
	PID, UID, GID   int32
	Command         string
	QPNFirst        uint32
	QPNLast         uint32
	Since           time.Time
	FromClient      uint64
	ToClient        uint64
	DropForeign     uint64
	DropForeignConn uint64 // its RC/UC frames to a local queue pair not connected to it
	Conns           int    // its queue pairs registered as connected
	DropBadSource   uint64
	DropMalformed   uint64
	Overflow        uint64
	Services        int   // RDMA CM service IDs it listens on
	Groups          int   // multicast groups it joined
	Regions         int   // memory regions it shares for direct placement
	SharedBytes     int64 // their bytes (mapped by the daemon)
}
