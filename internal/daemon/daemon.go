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
// a client can address any QPN, as any host on the wire can.
//
// Not here yet (issue 17): QP1 and the RDMA CM (frames to QPN 1 are dropped
// and counted), out-of-order contexts, multicast, direct placement into
// daemon-shared memory regions.
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/roce"
)

// Defaults of Config.
const (
	DefaultQPNs       = 4096
	DefaultMaxClients = 64
	DefaultMode       = 0o660
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
	// Log receives the daemon's events (nil: discarded).
	Log *slog.Logger
}

// Daemon serves one interface.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	up    *roce.Uplink
	ln    *net.UnixListener
	path  string
	hw    [6]byte
	local [][16]byte // the interface's addresses and link-local GID

	shift  uint                     // QPN block size is 1<<shift
	owners []atomic.Pointer[client] // QPN block → client

	mu        sync.Mutex // guards clients, nextID, nextBlock, closed
	clients   map[int]*client
	nextID    int
	nextBlock int
	closed    bool

	eg     egress
	st     counters
	wg     sync.WaitGroup
	upDone chan struct{}
}

// Start opens the uplink, listens on the socket and serves until Close.
func Start(cfg Config) (*Daemon, error) {
	if cfg.Interface == "" {
		return nil, errors.New("daemon: no interface")
	}
	if cfg.QPNs == 0 {
		cfg.QPNs = DefaultQPNs
	}
	if cfg.QPNs < 16 || cfg.QPNs > 1<<20 || cfg.QPNs&(cfg.QPNs-1) != 0 {
		return nil, fmt.Errorf("daemon: %d QPNs per client: want a power of two in 16..%d", cfg.QPNs, 1<<20)
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.Mode == 0 {
		cfg.Mode = DefaultMode
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	path := cfg.Socket
	if path == "" {
		p, err := proto.DefaultSocket(cfg.Interface)
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		path = p
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, path: path, clients: map[int]*client{}, nextID: 1,
		upDone: make(chan struct{})}
	d.shift = uint(bits.TrailingZeros(uint(cfg.QPNs)))
	d.owners = make([]atomic.Pointer[client], 1<<(24-d.shift))
	up, err := roce.OpenUplink(cfg.Interface, path, &roce.Options{Link: cfg.Link, XDPMode: cfg.XDPMode, Queues: cfg.Queues})
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.up = up
	if len(up.HWAddr) == 6 {
		copy(d.hw[:], up.HWAddr)
	}
	for _, a := range up.Addrs {
		d.local = append(d.local, a.As16())
	}
	d.local = append(d.local, roce.LinkLocalGID(d.hw).As16())
	ln, err := listen(path, cfg.Mode, cfg.Group)
	if err != nil {
		up.Close()
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.ln = ln
	d.eg.init(up.Link.Props().MaxFrame, 1024)
	d.log.Info("daemon serving", "dev", up.Name, "link", up.Link.Props().Name, "reason", up.Reason,
		"socket", path, "mode", fmt.Sprintf("%#o", cfg.Mode), "group", cfg.Group, "qpns_per_client", cfg.QPNs)
	go d.uplink()
	d.wg.Add(1)
	go d.accept()
	return d, nil
}

// listen makes the unix socket at path: its directory (0755) when missing,
// a stale socket file replaced (one no daemon answers on), then mode and
// group.
func listen(path string, mode os.FileMode, group string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another daemon answers on it", path)
		}
		os.Remove(path)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	fail := func(err error) (*net.UnixListener, error) { ln.Close(); return nil, err }
	if group != "" {
		gid, err := strconv.Atoi(group)
		if err != nil {
			g, err := user.LookupGroup(group)
			if err != nil {
				return fail(fmt.Errorf("socket group: %w", err))
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
		if err := os.Chown(path, -1, gid); err != nil {
			return fail(fmt.Errorf("socket group: %w", err))
		}
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		return fail(fmt.Errorf("socket mode: %w", err))
	}
	return ln, nil
}

// Socket is the path clients connect to.
func (d *Daemon) Socket() string { return d.path }

// Interface is the interface served; LinkName what carries its frames.
func (d *Daemon) Interface() string { return d.up.Name }

// LinkName says what carries the interface's frames ("AF_XDP (native)", "UDP").
func (d *Daemon) LinkName() string { return d.up.Link.Props().Name }

// Close stops accepting, ends every client (their ports close: they see
// ErrPeerGone), then closes the uplink, which detaches the XDP program.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	cs := make([]*client, 0, len(d.clients))
	for _, c := range d.clients {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	d.ln.Close()
	d.eg.close()
	for _, c := range cs {
		c.end()
	}
	d.wg.Wait()
	d.up.Link.Wake()
	err := d.up.Close()
	<-d.upDone
	return err
}

// blockRange is the QPN range of block b, without QPNs 0..0x10 (QP0, QP1
// and those rxe does not hand out) and the multicast QPN.
func (d *Daemon) blockRange(b int) (first, last uint32) {
	first, last = uint32(b)<<d.shift, uint32(b+1)<<d.shift-1
	return max(first, 0x11), min(last, 0xFFFFFE)
}

// takeBlock reserves a free QPN block for c, after the last one handed out
// so that a departed client's QPNs are not reused at once (its peers may
// still send to them). Called with d.mu held.
func (d *Daemon) takeBlock(c *client) bool {
	n := len(d.owners)
	for i := range n {
		b := (d.nextBlock + i) % n
		if d.owners[b].Load() == nil {
			c.block = b
			c.first, c.last = d.blockRange(b)
			d.owners[b].Store(c)
			d.nextBlock = (b + 1) % n
			return true
		}
	}
	return false
}

// owner is the client owning QPN n, nil when none does.
func (d *Daemon) owner(n uint32) *client { return d.owners[n>>d.shift].Load() }

// isLocal reports whether a is one of the interface's addresses.
func (d *Daemon) isLocal(a *[16]byte) bool {
	for i := range d.local {
		if d.local[i] == *a {
			return true
		}
	}
	return false
}
