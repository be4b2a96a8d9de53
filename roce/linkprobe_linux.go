package roce

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ProbeLinkFacts reads what the LinkAuto rule (LinkFacts.Choose) decides
// from, without disturbing the interface: its kind and driver, whether the
// driver reports zero-copy AF_XDP, whether UDP GSO can send there, and this
// process's privileges. Call it in the interface's network namespace.
func ProbeLinkFacts(ifname string) (LinkFacts, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return LinkFacts{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	info, err := interfaceInfo(h, ifname)
	if err != nil {
		return LinkFacts{}, err
	}
	return probeFacts(info), nil
}

func probeFacts(info *ifaceInfo) LinkFacts {
	f := LinkFacts{Ethernet: len(info.hw) == 6, Kind: info.kind, Virtual: info.kind != "device"}
	f.Driver = ethtoolDriver(info.name)
	f.ZeroCopy, f.ZeroCopyNote = xdpZeroCopy(info.index)
	f.GSO, f.GSONote = udpGSO(info.name)
	f.Privileged, f.PrivilegeNote = Privileged()
	return f
}

// ethtoolDriver returns the interface's driver name, "" when ethtool does
// not answer (loopback).
func ethtoolDriver(ifname string) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	di, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return ""
	}
	return unix.ByteSliceToString(di.Driver[:])
}

// The netdev generic netlink family (Linux 6.3; include/uapi/linux/netdev.h).
const (
	netdevCmdDevGet         = 1
	netdevAttrIfindex       = 1
	netdevAttrXDPFeatures   = 3
	netdevXDPActXSKZeroCopy = 1 << 3
)

// xdpZeroCopy asks the kernel whether the interface's driver does zero-copy
// AF_XDP (xdp-features xsk-zerocopy); note says why it does not know.
func xdpZeroCopy(ifindex int) (ok bool, note string) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return false, "the kernel does not report XDP features (Linux 6.3 does)"
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(&nl.Genlmsg{Command: netdevCmdDevGet, Version: 1})
	req.AddData(nl.NewRtAttr(netdevAttrIfindex, nl.Uint32Attr(uint32(ifindex))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return false, "XDP features: " + err.Error()
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			continue
		}
		for _, a := range attrs {
			if a.Attr.Type == netdevAttrXDPFeatures && len(a.Value) >= 8 {
				return binary.NativeEndian.Uint64(a.Value)&netdevXDPActXSKZeroCopy != 0, ""
			}
		}
	}
	return false, "the kernel's answer has no XDP features"
}

// udpGSO says whether link/udp's UDP_SEGMENT can send on the interface: the
// kernel must take the option, and before Linux 6.11 the device must
// offload transmit checksums (the kernel refuses GSO with EIO otherwise).
func udpGSO(ifname string) (ok bool, note string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, "socket: " + err.Error()
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 1400); err != nil {
		return false, "the kernel refuses UDP_SEGMENT: " + err.Error()
	}
	if kernelAtLeast(6, 11) {
		return true, ""
	}
	on, err := txChecksum(fd, ifname)
	switch {
	case err != nil:
		return false, "transmit checksum offload unknown (" + err.Error() + ") and Linux before 6.11 needs it for GSO"
	case !on:
		return false, "transmit checksum offload off, which Linux before 6.11 needs for GSO"
	}
	return true, ""
}

// txChecksum reads the interface's transmit checksum offload (ethtool -k:
// tx-checksumming).
func txChecksum(fd int, ifname string) (bool, error) {
	var v struct{ cmd, data uint32 }
	v.cmd = unix.ETHTOOL_GTXCSUM
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	ifr.data = unsafe.Pointer(&v)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return false, e
	}
	return v.data != 0, nil
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	maj, rest, _ := strings.Cut(rel, ".")
	mnr, _, _ := strings.Cut(rest, ".")
	if i := strings.IndexFunc(mnr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		mnr = mnr[:i] // "18-rc1"
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(mnr)
	if err1 != nil || err2 != nil {
		return false
	}
	return a > major || a == major && b >= minor
}
