package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/testenv"
)

// Prefix starts the name of every namespace a Lab creates.
const Prefix = "xdl-"

const netnsDir = "/run/netns"

// Privileged skips tb unless it may build labs (see testenv.Privileged).
func Privileged(tb testing.TB) {
	tb.Helper()
	testenv.Privileged(tb)
	testenv.Tool(tb, "ip", "install iproute2")
}

var labSeq atomic.Uint32

// A Lab is a set of network namespaces and the links between them.
type Lab struct {
	id string // "<pid>-<seq>"

	mu     sync.Mutex
	nss    []*NS
	relays []*Relay
	hosts  int // addresses handed out
	links  int
	closed bool
}

// New creates an empty lab, first removing namespaces left by earlier
// processes that no longer run.
func New() (*Lab, error) {
	if err := RemoveStale(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	return &Lab{id: strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(int(labSeq.Add(1)))}, nil
}

// NewT creates a lab that is closed when tb ends; it fails tb on error.
func NewT(tb testing.TB) *Lab {
	tb.Helper()
	l, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("netlab: close: %v", err)
		}
	})
	return l
}

// RemoveStale deletes the namespaces of labs whose creating process is gone.
func RemoveStale() error {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("netlab: remove stale labs: %w", err)
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, Prefix) {
			continue
		}
		pidStr, _, ok := strings.Cut(name[len(Prefix):], "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if err := deleteNS(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// processAlive reports whether pid runs; a zombie (killed, not yet reaped —
// common under a container init that reaps late) counts as gone.
func processAlive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		switch b[i+2] {
		case 'Z', 'X':
			return false
		}
	}
	return true
}

func deleteNS(name string) error {
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		if _, serr := os.Stat(netnsDir + "/" + name); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("netlab: ip netns delete %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close stops the lab's relays and deletes its namespaces (and with them
// every interface in them). Later calls do nothing.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	relays, nss := l.relays, l.nss
	l.relays, l.nss = nil, nil
	l.mu.Unlock()

	var errs []error
	for _, r := range relays {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(nss) - 1; i >= 0; i-- {
		if err := deleteNS(nss[i].Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// An NS is a network namespace of a lab.
type NS struct {
	// Name is the namespace's name under /run/netns (usable with `ip netns exec`).
	Name string
	// Short is the name given to AddNS.
	Short string
	lab   *Lab
}

// AddNS creates a namespace with its loopback up. short names it within the
// lab ("a", "b", "relay").
func (l *Lab) AddNS(short string) (*NS, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("netlab: add namespace: lab closed")
	}
	ns := &NS{Name: Prefix + l.id + "-" + short, Short: short, lab: l}
	if err := ipCmd("netns", "add", ns.Name); err != nil {
		return nil, err
	}
	l.nss = append(l.nss, ns)
	if err := ns.IP("link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	return ns, nil
}

// IP runs `ip -n NS args...`.
func (n *NS) IP(args ...string) error {
	return ipCmd(append([]string{"-n", n.Name}, args...)...)
}

// Command returns a command that runs name inside the namespace (through
// `ip netns exec`, which execs name in place). On Linux the command is
// killed when this process dies (a test binary that times out runs no
// cleanup: a server left running would hold the namespace's interface,
// or a lock it inherited, for good).
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	dieWithParent(c)
	return c
}

// Sysctl sets a sysctl (dotted name) inside the namespace.
func (n *NS) Sysctl(name, value string) error {
	return n.Do(func() error {
		p := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("netlab: sysctl %s: %w", name, err)
		}
		return nil
	})
}

// An Iface is one end of a veth pair.
type Iface struct {
	NS     *NS
	Name   string
	Index  int
	HWAddr net.HardwareAddr
	MTU    int
	// IPv4 (in 198.51.100.0/24) and IPv6 (in 2001:db8::/64) are the
	// interface's addresses; invalid for links made with Bare.
	IPv4, IPv6 netip.Addr
}

// Prefix4 and Prefix6 are the prefixes every lab addresses its hosts from.
var (
	Prefix4 = netip.MustParsePrefix("198.51.100.0/24")
	Prefix6 = netip.MustParsePrefix("2001:db8::/64")
)

// LinkConfig configures a veth pair.
type LinkConfig struct {
	// MTU of both ends; 0 means 1500. At most 9000.
	MTU int
	// Bare leaves the ends without addresses (and with IPv6 off), for relays.
	Bare bool
	// NoOffload turns off checksum and segmentation offloads on both ends, so
	// frames seen by packet sockets are complete (needed behind a relay).
	NoOffload bool
	// Queues is the number of rx and tx queues of each end; 0 means 1.
	Queues int
}

// newVeth checks cfg's MTU (default 1500) and names the ends of the next veth
// pair between a and b: the end in a is named after b and the other way round.
func (l *Lab) newVeth(a, b *NS, cfg LinkConfig) (mtu int, an, bn string, err error) {
	mtu = cfg.MTU
	if mtu == 0 {
		mtu = 1500
	}
	if mtu < 68 || mtu > 9000 {
		return 0, "", "", fmt.Errorf("netlab: connect: mtu %d outside 68..9000", mtu)
	}
	l.mu.Lock()
	l.links++
	n := l.links
	l.mu.Unlock()
	an, bn = "v"+strconv.Itoa(n)+b.Short, "v"+strconv.Itoa(n)+a.Short
	if len(an) > 15 || len(bn) > 15 {
		return 0, "", "", fmt.Errorf("netlab: connect: interface name %q or %q too long", an, bn)
	}
	return mtu, an, bn, nil
}

// Connect joins a and b by a veth pair and returns its two ends, up and (unless
// cfg.Bare) addressed.
func (l *Lab) Connect(a, b *NS, cfg LinkConfig) (*Iface, *Iface, error) {
	mtu, an, bn, err := l.newVeth(a, b, cfg)
	if err != nil {
		return nil, nil, err
	}
	args := []string{"link", "add", "name", an, "netns", a.Name, "mtu", strconv.Itoa(mtu)}
	if cfg.Queues > 1 {
		q := strconv.Itoa(cfg.Queues)
		args = append(args, "numtxqueues", q, "numrxqueues", q)
	}
	args = append(args, "type", "veth", "peer", "name", bn, "netns", b.Name, "mtu", strconv.Itoa(mtu))
	if cfg.Queues > 1 {
		q := strconv.Itoa(cfg.Queues)
		args = append(args, "numtxqueues", q, "numrxqueues", q)
	}
	if err := ipCmd(args...); err != nil {
		return nil, nil, err
	}
	ea, err := l.setupEnd(a, an, mtu, cfg)
	if err != nil {
		return nil, nil, err
	}
	eb, err := l.setupEnd(b, bn, mtu, cfg)
	if err != nil {
		return nil, nil, err
	}
	return ea, eb, nil
}

func (l *Lab) setupEnd(ns *NS, name string, mtu int, cfg LinkConfig) (*Iface, error) {
	e := &Iface{NS: ns, Name: name, MTU: mtu}
	if cfg.Bare {
		if err := ns.Sysctl("net.ipv6.conf."+name+".disable_ipv6", "1"); err != nil {
			return nil, err
		}
	} else {
		l.mu.Lock()
		l.hosts++
		h := l.hosts
		l.mu.Unlock()
		if h > 250 {
			return nil, errors.New("netlab: connect: out of addresses")
		}
		b4 := Prefix4.Addr().As4()
		b4[3] = byte(h)
		e.IPv4 = netip.AddrFrom4(b4)
		b6 := Prefix6.Addr().As16()
		b6[15] = byte(h)
		e.IPv6 = netip.AddrFrom16(b6)
		if err := ns.IP("addr", "add", e.IPv4.String()+"/24", "dev", name); err != nil {
			return nil, err
		}
		if err := ns.IP("addr", "add", e.IPv6.String()+"/64", "dev", name, "nodad"); err != nil {
			return nil, err
		}
	}
	if cfg.NoOffload {
		if out, err := ns.Command(context.Background(), "ethtool", "-K", name,
			"tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("netlab: ethtool -K %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	if err := ns.IP("link", "set", "dev", name, "up"); err != nil {
		return nil, err
	}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("netlab: %w", err)
		}
		e.Index, e.HWAddr = ifi.Index, ifi.HardwareAddr
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Up waits until the interface is operationally up (the veth peer is up too)
// or the timeout passes. The kernel's link watcher may take up to a second to
// mark it so (and to activate its queueing discipline, without which the
// kernel stack drops what it sends); AF_XDP frames flow before that.
func (e *Iface) Up(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var running bool
		err := e.NS.Do(func() error {
			ifi, err := net.InterfaceByName(e.Name)
			if err == nil {
				running = ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0
			}
			return err
		})
		if err == nil && running {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netlab: %s not running after %v (%v)", e.Name, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AddNeighbor adds a permanent neighbour entry for peer on e, so the first
// frames need no ARP/ND.
func (e *Iface) AddNeighbor(peer *Iface) error {
	for _, ip := range []netip.Addr{peer.IPv4, peer.IPv6} {
		if !ip.IsValid() {
			continue
		}
		if err := e.NS.IP("neigh", "replace", ip.String(), "lladdr", peer.HWAddr.String(), "dev", e.Name, "nud", "permanent"); err != nil {
			return err
		}
	}
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netlab: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// A Topo is a ready two-host lab: namespaces A and B joined directly by a veth
// pair, or through a relay namespace.
type Topo struct {
	Lab *Lab
	// A and B are the hosts' interfaces (A.NS and B.NS their namespaces).
	A, B *Iface
	// Relay forwards between A and B when the topology has one; nil otherwise.
	Relay *Relay
}

// NewPair builds two namespaces joined by one veth pair, addressed, up, with
// permanent neighbour entries both ways.
func NewPair(cfg LinkConfig) (*Topo, error) {
	l, err := New()
	if err != nil {
		return nil, err
	}
	t := &Topo{Lab: l}
	if err := t.buildPair(cfg); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return t, nil
}

func (t *Topo) buildPair(cfg LinkConfig) error {
	a, err := t.Lab.AddNS("a")
	if err != nil {
		return err
	}
	b, err := t.Lab.AddNS("b")
	if err != nil {
		return err
	}
	if t.A, t.B, err = t.Lab.Connect(a, b, cfg); err != nil {
		return err
	}
	return t.finish()
}

func (t *Topo) finish() error {
	for _, e := range []*Iface{t.A, t.B} {
		if err := e.Up(5 * time.Second); err != nil {
			return err
		}
	}
	if err := t.A.AddNeighbor(t.B); err != nil {
		return err
	}
	return t.B.AddNeighbor(t.A)
}

// NewRelayed builds A–relay–B: hosts A and B on one subnet, each joined by a
// veth pair to a relay namespace whose Relay forwards frames between the two
// with the impairments of rc. Offloads are off on every end (the relay sees
// whole frames).
func NewRelayed(cfg LinkConfig, rc RelayConfig) (*Topo, error) {
	l, err := New()
	if err != nil {
		return nil, err
	}
	t := &Topo{Lab: l}
	if err := t.buildRelayed(cfg, rc); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return t, nil
}

func (t *Topo) buildRelayed(cfg LinkConfig, rc RelayConfig) error {
	l := t.Lab
	a, err := l.AddNS("a")
	if err != nil {
		return err
	}
	b, err := l.AddNS("b")
	if err != nil {
		return err
	}
	r, err := l.AddNS("relay")
	if err != nil {
		return err
	}
	cfg.NoOffload = true
	hostCfg, bareCfg := cfg, cfg
	bareCfg.Bare = true
	// Address A before B so A gets .1 and B .2, as in NewPair.
	ea, ra, err := l.connectMixed(a, r, hostCfg, bareCfg)
	if err != nil {
		return err
	}
	eb, rb, err := l.connectMixed(b, r, hostCfg, bareCfg)
	if err != nil {
		return err
	}
	t.A, t.B = ea, eb
	for _, e := range []*Iface{ra, rb} {
		if err := e.NS.IP("link", "set", "dev", e.Name, "promisc", "on"); err != nil {
			return err
		}
	}
	if t.Relay, err = l.StartRelay(ra, rb, rc); err != nil {
		return err
	}
	for _, e := range []*Iface{ra, rb} {
		if err := e.Up(5 * time.Second); err != nil {
			return err
		}
	}
	return t.finish()
}

// connectMixed makes a veth between host h (addressed) and relay r (bare).
func (l *Lab) connectMixed(h, r *NS, hostCfg, bareCfg LinkConfig) (*Iface, *Iface, error) {
	mtu, hn, rn, err := l.newVeth(h, r, hostCfg)
	if err != nil {
		return nil, nil, err
	}
	if err := ipCmd("link", "add", "name", hn, "netns", h.Name, "mtu", strconv.Itoa(mtu),
		"type", "veth", "peer", "name", rn, "netns", r.Name, "mtu", strconv.Itoa(mtu)); err != nil {
		return nil, nil, err
	}
	eh, err := l.setupEnd(h, hn, mtu, hostCfg)
	if err != nil {
		return nil, nil, err
	}
	er, err := l.setupEnd(r, rn, mtu, bareCfg)
	if err != nil {
		return nil, nil, err
	}
	return eh, er, nil
}

// Pair is NewPair for tests: it skips tb when unprivileged, fails it on error
// and closes the lab when tb ends.
func Pair(tb testing.TB, cfg LinkConfig) *Topo {
	tb.Helper()
	Privileged(tb)
	t, err := NewPair(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = t.Close() })
	return t
}

// Relayed is NewRelayed for tests, like Pair.
func Relayed(tb testing.TB, cfg LinkConfig, rc RelayConfig) *Topo {
	tb.Helper()
	Privileged(tb)
	testenv.Tool(tb, "ethtool", "install ethtool")
	t, err := NewRelayed(cfg, rc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = t.Close() })
	return t
}

// Close removes the topology's lab.
func (t *Topo) Close() error { return t.Lab.Close() }
