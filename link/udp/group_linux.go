package udp

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// JoinGroup makes the link's socket a member of the multicast group on the
// interface with index ifindex (IP_ADD_MEMBERSHIP, or IPV6_JOIN_GROUP), so
// the kernel delivers the group's RoCE datagrams to it, and so the interface
// accepts the group's MAC. The socket is bound to all addresses (as roce
// opens it), or it would not receive them.
func (l *Link) JoinGroup(group netip.Addr, ifindex int) error {
	return l.group(group, ifindex, true)
}

// LeaveGroup undoes JoinGroup.
func (l *Link) LeaveGroup(group netip.Addr, ifindex int) error {
	return l.group(group, ifindex, false)
}

func (l *Link) group(group netip.Addr, ifindex int, join bool) error {
	what := "leave"
	if join {
		what = "join"
	}
	g := group.Unmap()
	if !g.IsMulticast() {
		return fmt.Errorf("udp: %s group %v: not a multicast address", what, group)
	}
	if !l.pktinfo {
		return fmt.Errorf("udp: %s group %v: the socket is bound to %v, not to all addresses", what, group, l.local)
	}
	var err error
	if g.Is4() {
		name, sname := unix.IP_DROP_MEMBERSHIP, "IP_DROP_MEMBERSHIP"
		if join {
			name, sname = unix.IP_ADD_MEMBERSHIP, "IP_ADD_MEMBERSHIP"
		}
		// A dual-stack IPv6 socket takes IPv4 memberships at level IP.
		err = os.NewSyscallError("setsockopt "+sname, unix.SetsockoptIPMreqn(l.fd, unix.IPPROTO_IP, name,
			&unix.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(ifindex)}))
	} else {
		name, sname := unix.IPV6_LEAVE_GROUP, "IPV6_LEAVE_GROUP"
		if join {
			name, sname = unix.IPV6_JOIN_GROUP, "IPV6_JOIN_GROUP"
		}
		err = os.NewSyscallError("setsockopt "+sname, unix.SetsockoptIPv6Mreq(l.fd, unix.IPPROTO_IPV6, name,
			&unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifindex)}))
	}
	if err != nil {
		return fmt.Errorf("udp: %s group %v: %w", what, group, err)
	}
	return nil
}
