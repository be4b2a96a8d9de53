package udp

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// enableOffload turns on UDP_GRO on the socket and GSO for Send, unless the
// device holding the bound address (ifname; "" when bound to all addresses)
// lacks transmit checksum offload, which UDP_SEGMENT needs (the kernel
// refuses it with EIO). What is off and why is logged once at info level.
// Send turns GSO off later if the kernel refuses it anyway (gso_linux.go).
func (l *Link) enableOffload(ifname string) {
	if err := unix.SetsockoptInt(l.fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		l.log.Info("udp: receiving one datagram per message: the kernel refused UDP_GRO", "err", err)
	} else {
		l.gro = true
	}
	if ifname != "" {
		if on, err := txChecksum(l.fd, ifname); err == nil && !on {
			l.log.Info("udp: GSO off, one datagram per frame: the device has no transmit checksum offload, which UDP_SEGMENT needs",
				"device", ifname)
			return
		}
	}
	l.gso.Store(true)
}

// txChecksum asks the driver whether transmit checksum offload is on
// (ETHTOOL_GTXCSUM), through the socket fd.
func txChecksum(fd int, ifname string) (bool, error) {
	type ethtoolValue struct{ cmd, data uint32 }
	type ifreq struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	v := &ethtoolValue{cmd: unix.ETHTOOL_GTXCSUM}
	ifr := &ifreq{data: uintptr(unsafe.Pointer(v))}
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(v)
	if e != 0 {
		return false, e
	}
	return v.data != 0, nil
}
