package xsk

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with its union holding a pointer.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// QueueCount returns the number of rx queues of the interface: the ethtool
// channel count (combined + rx) where the driver reports one, otherwise the
// number of rx queues the kernel set up for the device (netlink).
func QueueCount(ifname string) (int, error) {
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("xsk: queue count: interface name %q too long", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(fd)
		ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
		var ifr ifreqData
		copy(ifr.name[:], ifname)
		ifr.data = unsafe.Pointer(&ch)
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
		if e == 0 {
			if n := int(ch.combinedCount + ch.rxCount); n > 0 {
				return n, nil
			}
		}
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("xsk: queue count of %s: %w", ifname, err)
	}
	if n := l.Attrs().NumRxQueues; n > 0 {
		return n, nil
	}
	return 1, nil
}

// probe opens a minimal socket on queue 0 of ifname with the given bind mode
// and options, and closes it again.
func probe(ifname string, c Config) (*Socket, error) {
	c.Queues = nil
	c.RxChunks, c.TxChunks = 16, 16
	if c.MTU == 0 {
		c.MTU = 1500
	}
	return OpenQueue(ifname, 0, &c)
}

// classify maps a probe's bind failure to the features contract: nil means
// supported, an error wrapping link.ErrNotSupported means not, anything else
// is inconclusive.
func classify(feature string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, link.ErrNotSupported) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) ||
		errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.ENOPROTOOPT) {
		if errors.Is(err, link.ErrNotSupported) {
			return fmt.Errorf("xsk: probe %s: %w", feature, err)
		}
		return fmt.Errorf("xsk: probe %s: %w: %w", feature, link.ErrNotSupported, err)
	}
	return fmt.Errorf("xsk: probe %s: %w", feature, err)
}

// ProbeZeroCopy reports whether AF_XDP sockets on ifname can run zero-copy
// (queue 0 must be free). nil: supported; wrapping link.ErrNotSupported: not
// (veth and tap never do); any other error: inconclusive (permissions, no such
// interface).
func ProbeZeroCopy(ifname string) error {
	s, err := probe(ifname, Config{Bind: BindZeroCopy})
	if err != nil {
		return classify("zero-copy", err)
	}
	return s.Close()
}

// ProbeNeedWakeup reports whether the kernel supports XDP_USE_NEED_WAKEUP
// (Linux 5.4+) on ifname; same error contract as ProbeZeroCopy.
func ProbeNeedWakeup(ifname string) error {
	s, err := probe(ifname, Config{Bind: BindCopy})
	if err != nil {
		return classify("need_wakeup", err)
	}
	return s.Close()
}

// ProbeMultiBuffer reports whether AF_XDP multi-buffer (XDP_USE_SG, Linux
// 6.6+ in copy mode) works on ifname; same error contract as ProbeZeroCopy.
func ProbeMultiBuffer(ifname string) error {
	s, err := probe(ifname, Config{Bind: BindCopy, MultiBuffer: true})
	if err != nil {
		return classify("multi-buffer", err)
	}
	return s.Close()
}
