package roce

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link"
)

// heldGrace is how long Open keeps trying while the interface is held: a
// process on its way out lets go a moment after its successor may start.
const heldGrace = 500 * time.Millisecond

// retryHeld calls claim until it succeeds, fails for another reason than a
// holder, or heldGrace has passed.
func retryHeld(claim func() (link.Link, []func() error, error)) (link.Link, []func() error, error) {
	deadline := time.Now().Add(heldGrace)
	for {
		l, cleanup, err := claim()
		if err == nil || !errors.Is(err, ErrHeld) || time.Now().After(deadline) {
			return l, cleanup, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// claimXSK opens the AF_XDP link once no other process holds the interface
// (see holder_linux.go): it claims the interface's lock, checks for another
// XDP program and for a process bound to the RoCE port on its addresses, and
// names the holder in a *HeldError if there still is one after heldGrace.
// Without the capabilities it fails at once, wrapping os.ErrPermission. The
// lock is released after the program is detached (the first cleanup runs
// last).
func claimXSK(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	return retryHeld(func() (link.Link, []func() error, error) { return tryXSK(info, o) })
}

func tryXSK(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	if ok, why := Privileged(); !ok {
		return nil, nil, fmt.Errorf("AF_XDP: %s: %w", why, os.ErrPermission)
	}
	lk, err := takeLock(xdpLockName(info.index), "AF_XDP on "+info.name+" (setting up)")
	if err != nil {
		return nil, nil, err
	}
	if h := xskHolder(info, true); h != nil {
		lk.close()
		return nil, nil, &HeldError{Holder: *h}
	}
	l, cleanup, err := openXSK(info, o)
	if err != nil {
		lk.close()
		if errors.Is(err, bpf.ErrBusy) || errors.Is(err, unix.EBUSY) {
			if h := xskHolder(info, true); h != nil { // it came after the check
				return nil, nil, &HeldError{Holder: *h}
			}
		}
		return nil, nil, err
	}
	holds := "XDP program " + bpf.Name
	if nl, err := netlink.LinkByIndex(info.index); err == nil && nl.Attrs().Xdp != nil && nl.Attrs().Xdp.Attached {
		holds = fmt.Sprintf("XDP program %s (id %d)", bpf.Name, nl.Attrs().Xdp.ProgId)
	}
	lk.setHolds(holds + o.holder)
	return l, append([]func() error{lk.close}, cleanup...), nil
}

// claimUDP opens link/udp unless frames for the interface would not reach
// it: on the RoCE port, another process's steering program on the interface
// takes them. When the port is taken, the error names the process bound to
// it (after heldGrace, as claimXSK). On a fixed port, the process then
// announces that it holds the port.
func claimUDP(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	return retryHeld(func() (link.Link, []func() error, error) { return tryUDP(info, o) })
}

func tryUDP(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	port := o.UDPPort
	if port == 0 {
		port = udpPortDefault
	}
	if port == udpPortDefault {
		if h := queryLock(xdpLockName(info.index)); h != nil {
			return nil, nil, &HeldError{Holder: *h}
		}
	}
	l, err := openUDP(info, o)
	if err != nil {
		if errors.Is(err, unix.EADDRINUSE) && port > 0 {
			if h := udpHolder(info.index, nil, port); h != nil {
				return nil, nil, &HeldError{Holder: *h}
			}
		}
		return nil, nil, err
	}
	if port <= 0 {
		return l, nil, nil
	}
	lk, err := takeLock(udpLockName(info.index, port), fmt.Sprintf("UDP port %d on %s", port, info.name))
	if err != nil {
		// Only a process sharing the bound port (SO_REUSEPORT) can have
		// the name: the port is open here all the same.
		return l, nil, nil
	}
	return l, []func() error{lk.close}, nil
}
