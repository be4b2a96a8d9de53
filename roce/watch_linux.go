package roce

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
)

// watcher keeps a device's port following its interface: it subscribes to
// the interface's address and link changes (netlink, in the namespace Open
// ran in) and rebuilds the GID table, moves the port state and raises the
// events. Over AF_XDP it also adds the new addresses to the steering
// program and removes the old ones, so frames for them reach the device.
type watcher struct {
	d       *Device
	index   int
	name    string
	h       *netlink.Handle // in the interface's namespace
	fd      int             // a socket there, for ethtool
	xdp     *bpf.Program    // nil: not AF_XDP
	done    chan struct{}
	wg      sync.WaitGroup
	addrs   chan netlink.AddrUpdate
	links   chan netlink.LinkUpdate
	errOnce sync.Once
}

// watchInterface starts following the interface (see watcher). The calling
// thread must be in the interface's network namespace. The returned function
// ends the subscription and waits for its goroutines.
func (d *Device) watchInterface(info *ifaceInfo) (func() error, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("watch %s: netlink: %w", info.name, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("watch %s: %w", info.name, err)
	}
	d.port.mu.Lock()
	d.port.up = info.up // as when Open looked: no event
	d.port.mu.Unlock()
	w := &watcher{d: d, index: info.index, name: info.name, h: h, fd: fd, xdp: info.xdp,
		done: make(chan struct{}), addrs: make(chan netlink.AddrUpdate, 64), links: make(chan netlink.LinkUpdate, 64)}
	// The subscriptions' sockets are made in this thread's namespace.
	err = netlink.AddrSubscribeWithOptions(w.addrs, w.done, netlink.AddrSubscribeOptions{})
	if err == nil {
		err = netlink.LinkSubscribeWithOptions(w.links, w.done, netlink.LinkSubscribeOptions{})
		if err != nil {
			w.links = nil
		}
	} else {
		w.addrs, w.links = nil, nil
	}
	w.wg.Add(1)
	go w.run()
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("watch %s: netlink subscribe: %w", info.name, err)
	}
	// Changes between Open's look and the subscription.
	if err := w.syncLink(); err != nil {
		w.stop()
		return nil, err
	}
	if err := w.syncAddrs(); err != nil {
		w.stop()
		return nil, err
	}
	return w.stop, nil
}

func (w *watcher) stop() error {
	w.errOnce.Do(func() {
		close(w.done)
		w.wg.Wait()
		w.h.Close()
		unix.Close(w.fd)
	})
	return nil
}

// run handles updates until both subscriptions end (stop closes their
// sockets; the library then closes the channels, which must be drained).
func (w *watcher) run() {
	defer w.wg.Done()
	addrs, links := w.addrs, w.links
	for addrs != nil || links != nil {
		select {
		case u, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
			if u.LinkIndex == w.index {
				_ = w.syncAddrs() // on failure the table stays as it was until the next change
			}
		case u, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if u.Attrs().Index == w.index {
				w.d.port.mu.Lock()
				w.d.port.speedMbps = ethtoolSpeed(w.fd, w.name)
				w.d.port.mu.Unlock()
				w.d.setUp(linkUp(u.Attrs()))
			}
		}
	}
}

// syncLink reads the interface's state and speed.
func (w *watcher) syncLink() error {
	l, err := w.h.LinkByIndex(w.index)
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.name, err)
	}
	w.d.port.mu.Lock()
	w.d.port.speedMbps = ethtoolSpeed(w.fd, w.name)
	w.d.port.mu.Unlock()
	w.d.setUp(linkUp(l.Attrs()))
	return nil
}

// syncAddrs lists the interface's addresses (IPv4 first, then IPv6, in the
// kernel's order, as Open does), rebuilds the GID table and tells the
// steering program about the addresses added and removed.
func (w *watcher) syncAddrs() error {
	addrs, err := linkAddrs(w.h, &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: w.index}})
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.name, err)
	}
	added, removed := w.d.setAddrs(addrs)
	if w.xdp == nil {
		return nil
	}
	var errs []error
	for _, g := range added {
		errs = append(errs, w.xdp.AddLocalIP(IPFromGID(g)))
	}
	for _, g := range removed {
		errs = append(errs, w.xdp.RemoveLocalIP(IPFromGID(g)))
	}
	return errors.Join(errs...)
}
