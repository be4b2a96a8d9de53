package roce

import (
	"fmt"
	"net"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce/wire"
)

// InterfaceAttr returns the attributes a device opened on the interface
// with opts would report (Device.Query, Device.QueryPort(1)), without
// opening one: what `xdproce info` prints. Call it in the interface's
// network namespace.
func InterfaceAttr(ifname string, opts *Options) (DeviceAttr, PortAttr, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return DeviceAttr{}, PortAttr{}, fmt.Errorf("roce: interface attributes: netlink: %w", err)
	}
	defer h.Close()
	info, err := interfaceInfo(h, ifname)
	if err != nil {
		return DeviceAttr{}, PortAttr{}, fmt.Errorf("roce: interface attributes: %w", err)
	}
	hw := deviceMAC(nil, info.hw, info.addrs) // as Open makes it
	speed := 0
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		speed = ethtoolSpeed(fd, ifname)
		unix.Close(fd)
	}
	pmtu := wire.PathMTU(min(info.mtu, udp.MaxAutoMTU))
	return deviceAttr(hw, &o), portAttr(info.up, pmtu, speed), nil
}

// linkUp is rxe's port state: the interface is up and has carrier.
func linkUp(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && a.RawFlags&unix.IFF_LOWER_UP != 0
}

// ethtoolCmd is struct ethtool_cmd (ETHTOOL_GSET), up to speed_hi.
type ethtoolCmd struct {
	cmd, supported, advertising uint32
	speed                       uint16
	duplex, port, phyAddress    uint8
	transceiver, autoneg, mdio  uint8
	maxTxPkt, maxRxPkt          uint32
	speedHi                     uint16
	mdix, mdixCtrl              uint8
	lpAdvertising               uint32
	_                           [2]uint32
}

// ifreqPtr is struct ifreq with its union holding a pointer.
type ifreqPtr struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolSpeed returns the interface's speed in Mb/s from ethtool through
// the socket fd (whose network namespace names the interface), 0 when the
// driver reports none.
func ethtoolSpeed(fd int, ifname string) int {
	if len(ifname) >= unix.IFNAMSIZ {
		return 0
	}
	cmd := ethtoolCmd{cmd: unix.ETHTOOL_GSET}
	var ifr ifreqPtr
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(&cmd)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return 0
	}
	s := uint32(cmd.speedHi)<<16 | uint32(cmd.speed)
	if s == 0 || s == 0xffffffff { // SPEED_UNKNOWN
		return 0
	}
	return int(s)
}
