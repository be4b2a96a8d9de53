package roce

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/link"
)

// An Uplink is an interface's link held by the xdproce daemon
// (internal/daemon) on behalf of the processes it serves: the AF_XDP
// sockets and the steering program, or the kernel UDP socket, as Open would
// claim them, and the announcement that makes Open in other processes
// attach to the daemon instead of refusing them (see AnnouncedDaemon).
type Uplink struct {
	// Link carries the interface's frames; the daemon owns it.
	Link link.Link
	// Name, Index, HWAddr and Addrs describe the interface; MTU is the
	// link's.
	Name   string
	Index  int
	MTU    int
	HWAddr net.HardwareAddr
	Addrs  []netip.Addr
	// Reason says why this link was chosen.
	Reason string

	xdp     func() (Counters, error)
	join    groupJoiner
	netns   *os.File // the interface's network namespace (nil: unknown)
	resolve func(netip.Addr) (net.HardwareAddr, error)
	cleanup []func() error
}

// OpenUplink claims the interface ifname for a daemon listening on socket:
// it announces socket as the interface's daemon (ErrHeld when another
// daemon serves it), then opens the link opts.Link selects (LinkAuto:
// the same rule as Open's, LinkFacts.Choose; LinkDaemon is refused).
func OpenUplink(ifname, socket string, opts *Options) (*Uplink, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("roce: uplink %s: netlink: %w", ifname, err)
	}
	info, err := interfaceInfo(h, ifname)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("roce: uplink: %w", err)
	}
	dl, err := takeLock(daemonLockName(info.index), socket)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("roce: uplink %s: %w", ifname, err)
	}
	o.holder = ", for the xdproce daemon (PID " + fmt.Sprint(os.Getpid()) + ", socket " + socket + ")"
	if o.Link == LinkDaemon {
		h.Close()
		dl.close()
		return nil, fmt.Errorf("roce: uplink %s: a daemon's uplink cannot be a daemon", ifname)
	}
	l, cleanup, reason, err := claimLink(info, &o)
	if err != nil {
		h.Close()
		dl.close()
		return nil, fmt.Errorf("roce: uplink %s: %w", ifname, err)
	}
	cleanup = append([]func() error{dl.close, func() error { h.Close(); return nil }}, cleanup...)
	u := &Uplink{Link: l, Name: info.name, Index: info.index, MTU: l.Props().MTU, HWAddr: info.hw,
		Addrs: info.addrs, Reason: reason, cleanup: cleanup}
	if len(l.Props().HWAddr) == 6 {
		u.resolve = newNeighResolver(h, info, cmp.Or(o.NeighborTimeout, 3*time.Second))
	}
	if info.xdp != nil {
		u.xdp = xdpCounters(info.xdp, l)
	}
	u.join = newGroupJoiner(info, l)
	// Group memberships are sockets, made in the interface's namespace
	// whatever thread asks later.
	if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
		u.netns = f
		u.cleanup = append(u.cleanup, f.Close)
	}
	return u, nil
}

// JoinGroup joins the multicast group (or takes the IPv4 broadcast address:
// the caller checks which it is) on the interface, as Device.JoinGroup
// does, for the daemon's clients.
func (u *Uplink) JoinGroup(group netip.Addr) (leave func() error, err error) {
	if u.join == nil {
		return nil, fmt.Errorf("the %s link cannot join groups", u.Link.Props().Name)
	}
	if u.netns == nil {
		return u.join.join(group.Unmap())
	}
	type res struct {
		leave func() error
		err   error
	}
	done := make(chan res, 1)
	go func() {
		// The thread is never unlocked: it ends with this goroutine
		// rather than run other code in the namespace it entered.
		runtime.LockOSThread()
		if err := unix.Setns(int(u.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- res{nil, os.NewSyscallError("setns", err)}
			return
		}
		leave, err := u.join.join(group.Unmap())
		done <- res{leave, err}
	}()
	r := <-done
	return r.leave, r.err
}

// Resolve returns the MAC address frames to ip leave with: that of ip on
// the link or of the gateway the kernel routes it through, asking the
// kernel to resolve it when needed (up to Options.NeighborTimeout, 3 s by
// default). nil, nil on a link without MAC addresses (UDP). One call at a
// time.
func (u *Uplink) Resolve(ip netip.Addr) (net.HardwareAddr, error) {
	if u.resolve == nil {
		return nil, nil
	}
	return u.resolve(ip)
}

// XDPCounters returns the steering program's verdict counters and the
// AF_XDP sockets' statistics (nil, nil without AF_XDP; on an error, what
// could be read with it).
func (u *Uplink) XDPCounters() (Counters, error) {
	if u.xdp == nil {
		return nil, nil
	}
	return u.xdp()
}

// Close closes the link, detaches what was attached and withdraws the
// announcement, last.
func (u *Uplink) Close() error {
	err := u.Link.Close()
	if err == link.ErrClosed {
		err = nil
	}
	for i := len(u.cleanup) - 1; i >= 0; i-- {
		if e := u.cleanup[i](); e != nil && err == nil {
			err = e
		}
	}
	return err
}
