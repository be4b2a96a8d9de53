package mcast

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// listenGroup opens a UDP socket bound to group:port (so it receives that
// group's datagrams only) that is a member of group on the interface.
func listenGroup(group netip.Addr, port int, ifi *net.Interface) (*net.UDPConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "mcast-control")
	defer f.Close()
	steps := []struct {
		what string
		err  error
	}{
		{"SO_REUSEADDR", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)},
		{"bind", unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: group.As4()})},
		{"IP_ADD_MEMBERSHIP", unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifi.Index)})},
	}
	for _, s := range steps {
		if s.err != nil {
			return nil, fmt.Errorf("mcast: control socket on %v:%d: %w", group, port, os.NewSyscallError(s.what, s.err))
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
// the interface with TTL 1.
func dialUnicast(local netip.Addr, ifi *net.Interface) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, fmt.Errorf("mcast: control socket: %w", err)
	}
	raw, err := c.SyscallConn()
	if err == nil {
		var serr error
		err = raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifi.Index)})
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 1)
			}
		})
		if err == nil {
			err = serr
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("mcast: control socket: setsockopt IP_MULTICAST_IF/TTL: %w", err)
	}
	return c, nil
}
