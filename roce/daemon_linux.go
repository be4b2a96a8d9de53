package roce

// Attaching to the xdproce daemon (internal/daemon): a process whose
// interface is served by a daemon gets a link/shm port from it instead of
// opening the interface itself. The daemon owns the interface; this process
// keeps its queue pairs and memory regions and runs its own engine over the
// port, with QPNs from the range the daemon gave it.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce/mr"
)

// daemonDialTimeout bounds the handshake with a daemon.
const daemonDialTimeout = 3 * time.Second

// daemonLockName is the abstract socket a daemon serving the interface
// holds; it answers the daemon's socket path (see holder_linux.go).
func daemonLockName(ifindex int) string { return "@xdproce/daemon/" + strconv.Itoa(ifindex) }

// AnnouncedDaemon returns the socket path of the xdproce daemon serving the
// interface with index ifindex in this network namespace, and its PID (0 when
// not visible); "" when none does.
func AnnouncedDaemon(ifindex int) (path string, pid int) {
	h := queryLock(daemonLockName(ifindex))
	if h == nil || h.Holds == "" {
		return "", 0
	}
	return h.Holds, h.PID
}

// daemonSocket picks the socket to attach to: Options.Daemon,
// $XDPROCE_DAEMON, else the daemon announced for the interface; "" when
// there is none. why says where the path came from.
func daemonSocket(o *Options, info *ifaceInfo) (path, why string) {
	if o.Daemon != "" {
		return o.Daemon, "daemon socket given"
	}
	if p := os.Getenv(EnvDaemon); p != "" {
		return p, "daemon socket from $" + EnvDaemon
	}
	if info != nil {
		if p, pid := AnnouncedDaemon(info.index); p != "" {
			who := "xdproce daemon"
			if pid > 0 {
				who += " (PID " + strconv.Itoa(pid) + ")"
			}
			return p, who + " serves " + info.name
		}
	}
	return "", ""
}

// daemonLink is the client's end of a daemon port. It reports the daemon's
// link properties (MTU, MAC, forced source port, synthetic headers) so
// that the device encodes frames as the wire link needs them, and closes
// the connection to the daemon with the port.
type daemonLink struct {
	*shm.Link
	props  link.Props
	conn   *net.UnixConn
	once   sync.Once
	callMu sync.Mutex // one request to the daemon at a time
}

// call asks the daemon for r (proto.Call).
func (l *daemonLink) call(r *proto.Request) error {
	l.callMu.Lock()
	defer l.callMu.Unlock()
	if err := proto.Call(l.conn, r, daemonDialTimeout); err != nil {
		return fmt.Errorf("xdproce daemon: %w", err)
	}
	return nil
}

// listenService and unlistenService make the daemon steer the REQs of an
// RDMA CM service ID to this client (cmRegistrar).
func (l *daemonLink) listenService(id uint64) error {
	return l.call(&proto.Request{Op: proto.OpListen, ServiceID: id})
}

func (l *daemonLink) unlistenService(id uint64) error {
	return l.release(&proto.Request{Op: proto.OpUnlisten, ServiceID: id})
}

// release asks the daemon to undo something; with the connection closed,
// by this side or the daemon's, there is nothing to undo: the daemon forgot
// the client's services, groups, regions and connections when it went.
func (l *daemonLink) release(r *proto.Request) error {
	if err := l.call(r); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, unix.EPIPE) &&
		!errors.Is(err, unix.ECONNRESET) {
		return err
	}
	return nil
}

// connectQP and disconnectQP tell the daemon the peer of a connected
// queue pair, and that it has none any more (connRegistrar).
func (l *daemonLink) connectQP(qpn uint32, peer netip.Addr, peerQPN uint32) error {
	return l.call(&proto.Request{Op: proto.OpConnQP, QPN: qpn, GID: peer.String(), PeerQPN: peerQPN})
}

func (l *daemonLink) disconnectQP(qpn uint32) error {
	return l.release(&proto.Request{Op: proto.OpDisconnQP, QPN: qpn})
}

// join asks the daemon to join group on its interface for this client
// (groupJoiner); the group's frames then come through the port.
func (l *daemonLink) join(group netip.Addr) (func() error, error) {
	if err := l.call(&proto.Request{Op: proto.OpJoin, Group: group.String()}); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = l.release(&proto.Request{Op: proto.OpLeave, Group: group.String()}) })
		return err
	}, nil
}

// broadcast lets every IPv4 address through: the daemon, which knows its
// interface's subnets, refuses one that is not a broadcast address.
func (l *daemonLink) broadcast(a netip.Addr) bool { return a.Unmap().Is4() }

func (l *daemonLink) Props() link.Props { return l.props }

func (l *daemonLink) Close() error {
	err := l.Link.Close()
	l.once.Do(func() { l.conn.Close() })
	return err
}

// attachDaemon connects to the daemon at path and returns the port as a
// link, the interface's description as the daemon sees it, and the QPN
// range; o gets the range and the daemon's limit on memory regions.
func attachDaemon(path string, o *Options) (link.Link, *ifaceInfo, error) {
	cmd := filepath.Base(os.Args[0])
	if len(os.Args) > 1 {
		cmd += " " + os.Args[1]
	}
	conn, w, port, err := proto.Dial(path, cmd, daemonDialTimeout)
	if err != nil {
		return nil, nil, fmt.Errorf("xdproce daemon at %s: %w", path, err)
	}
	info := &ifaceInfo{name: w.Interface, mtu: w.MTU}
	var bad error
	if w.HWAddr != "" {
		if info.hw, bad = net.ParseMAC(w.HWAddr); bad == nil && len(info.hw) != 6 {
			bad = fmt.Errorf("MAC %s is not Ethernet", w.HWAddr)
		}
	}
	for _, s := range w.Addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			bad = err
			break
		}
		info.addrs = append(info.addrs, a)
	}
	if bad == nil && port.Props().MTU != w.MTU {
		bad = fmt.Errorf("port MTU %d, link MTU %d", port.Props().MTU, w.MTU)
	}
	if bad != nil {
		port.Close()
		conn.Close()
		return nil, nil, fmt.Errorf("xdproce daemon at %s: bad welcome: %w", path, bad)
	}
	props := port.Props()
	props.Name = "daemon (" + w.Link + " on " + w.Interface + ")"
	props.HWAddr = info.hw
	props.SrcPort = w.SrcPort
	props.SyntheticHeaders = w.Synthetic
	o.qpns = [2]uint32{w.QPNFirst, w.QPNLast}
	o.commIDs = [2]uint32{w.CommFirst, w.CommLast}
	if w.MaxMRs > 0 && (o.MaxMRs == 0 || o.MaxMRs > w.MaxMRs) {
		o.MaxMRs = w.MaxMRs
	}
	if n := int(w.QPNLast - w.QPNFirst + 1); o.MaxQPs == 0 || o.MaxQPs > n {
		o.MaxQPs = n
	}
	dl := &daemonLink{Link: port, props: props, conn: conn}
	o.shared = &sharedRegions{share: dl.share, placeKey: dl.placeKey, revoke: dl.revokeQP}
	return dl, info, nil
}

// share makes a sealed memfd of size bytes, maps it and shares it with the
// daemon (proto.OpRegMem) for direct placement; release unshares and
// unmaps it.
func (l *daemonLink) share(size int) ([]byte, uint32, func() error, error) {
	n := (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	fd, err := unix.MemfdCreate("xdproce-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd) // the mapping and the daemon's copy keep the memory
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, 0, nil, fmt.Errorf("ftruncate memfd to %d bytes: %w", n, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, 0, nil, fmt.Errorf("seal memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	l.callMu.Lock()
	rep, err := proto.CallFD(l.conn, &proto.Request{Op: proto.OpRegMem}, fd, daemonDialTimeout)
	l.callMu.Unlock()
	if err != nil {
		unix.Munmap(mem)
		return nil, 0, nil, fmt.Errorf("xdproce daemon: %w", err)
	}
	id := rep.Region
	release := func() error {
		err := l.release(&proto.Request{Op: proto.OpDeregMem, Region: id})
		return errors.Join(err, unix.Munmap(mem))
	}
	return mem[:size:size], id, release, nil
}

// placeKey registers rkey of shared region id with the daemon
// (proto.OpPlaceKey): n bytes from the region's start, addressed from va.
func (l *daemonLink) placeKey(id, rkey, pd uint32, access mr.Access, va, n uint64) error {
	return l.call(&proto.Request{Op: proto.OpPlaceKey, Region: id, RKey: rkey, PD: pd, Access: uint32(access),
		VA: va, Len: n})
}

// revokeQP withdraws the placement grant of queue pair qpn
// (proto.OpRevokeQP); a closed connection has none left.
func (l *daemonLink) revokeQP(qpn uint32) error {
	return l.release(&proto.Request{Op: proto.OpRevokeQP, QPN: qpn})
}

// openDaemon is Open's daemon path: it attaches to the daemon at path and
// makes the device over the port. local is the interface as this namespace
// sees it, nil when it has none of that name; h is Open's netlink handle,
// which the device keeps for neighbour lookups when local is the daemon's
// interface (same MAC) and closes otherwise. A client in another namespace
// reaching the daemon through its socket path has no neighbour table for
// the daemon's link: its frames leave with the MACs the daemon fills in.
func openDaemon(ifname, path, why string, local *ifaceInfo, h *netlink.Handle, o *Options) (*Device, error) {
	l, info, err := attachDaemon(path, o)
	if err != nil {
		h.Close()
		return nil, err
	}
	o.Addrs = info.addrs
	o.HWAddr = info.hw
	if local != nil && local.hw.String() == info.hw.String() && o.Resolve == nil {
		o.Resolve = newNeighResolver(h, local, o.NeighborTimeout)
	} else {
		h.Close()
		h = nil
	}
	d, err := newDevice(l, o, ifname, why+": attached to "+path)
	if err != nil {
		l.Close()
		if h != nil {
			h.Close()
		}
		return nil, err
	}
	dl := l.(*daemonLink)
	d.cmReg, d.join, d.conns = dl, dl, dl
	d.shared.sync = d.sync
	if h != nil {
		d.cleanup = []func() error{func() error { h.Close(); return nil }}
	}
	return d, nil
}
