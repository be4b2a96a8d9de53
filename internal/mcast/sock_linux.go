package mcast

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// listenGroup opens a UDP socket bound to group:port (so it receives that
// group's datagrams only) that is a member of group on the interface (a
// broadcast address has nothing to join).
func listenGroup(group netip.Addr, port int, ifi *net.Interface) (*net.UDPConn, error) {
	fam := unix.AF_INET
	if group.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "mcast-control")
	defer f.Close()
	type step struct {
		what string
		do   func() error
	}
	steps := []step{
		{"SO_REUSEADDR", func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }},
	}
	switch {
	case !group.IsMulticast(): // a broadcast address: nothing to join
		steps = append(steps,
			step{"bind", func() error { return unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: group.As4()}) }})
	case group.Is4():
		steps = append(steps,
			step{"bind", func() error { return unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: group.As4()}) }},
			step{"IP_ADD_MEMBERSHIP", func() error {
				return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
					&unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifi.Index)})
			}})
	default:
		steps = append(steps,
			step{"bind", func() error {
				return unix.Bind(fd, &unix.SockaddrInet6{Port: port, Addr: group.As16(), ZoneId: uint32(ifi.Index)})
			}},
			step{"IPV6_JOIN_GROUP", func() error {
				return unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
					&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifi.Index)})
			}})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return nil, fmt.Errorf("mcast: control socket on %v: %w", netip.AddrPortFrom(group, uint16(port)), os.NewSyscallError(s.what, err))
		}
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("mcast: control socket: %w", err)
	}
	return c.(*net.UDPConn), nil
}

// dialUnicast opens the socket a side sends from and receives answers on:
// bound to the interface's address (an ephemeral port), multicasting out of
// the interface with TTL (hop limit) 1, allowed to broadcast.
func dialUnicast(local netip.Addr, ifi *net.Interface) (*net.UDPConn, error) {
	network := "udp4"
	if local.Is6() {
		network = "udp6"
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, fmt.Errorf("mcast: control socket: %w", err)
	}
	raw, err := c.SyscallConn()
	if err == nil {
		var serr error
		err = raw.Control(func(fd uintptr) {
			if local.Is6() {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index)
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 1)
				}
				return
			}
			serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifi.Index)})
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 1)
			}
			if serr == nil { // hellos to a broadcast address
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
			}
		})
		if err == nil {
			err = serr
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("mcast: control socket: setsockopt multicast interface/hops: %w", err)
	}
	return c, nil
}
