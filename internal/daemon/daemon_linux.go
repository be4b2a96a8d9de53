package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/roce"
)

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
	neigh  neighbours
	svc    services     // RDMA CM service IDs (cm_linux.go)
	grp    groups       // multicast groups (mcast_linux.go)
	memMu  sync.RWMutex // guards the clients' shared regions (mem_linux.go); copies hold it shared
	pt     placeTable   // placement requests waiting for their responder (place_linux.go)
	plMu   sync.Mutex
	pl     placeCounters
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
	d.grp.join = up.JoinGroup
	d.grp.isBC = func(a netip.Addr) bool { return roce.IsBroadcastOf(up.Index, a) }
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
	d.neigh.init()
	go d.resolver()
	go d.uplink()
	d.wg.Add(1)
	go d.accept()
	return d, nil
}

// listen makes the unix socket at path: its directory (0755) when missing,
// a stale socket file replaced (one no daemon answers on), then mode and
// group.
func listen(path string, mode os.FileMode, group string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A directory another user owns could swap the socket for theirs.
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("socket directory %s belongs to uid %d, not this process's %d", dir, st.Uid, os.Geteuid())
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
	d.neigh.close()
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
			c.commFirst, c.commLast = d.commRange(b)
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
