//go:build !linux

package mcast

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/xdproce/xdproce/link"
)

func listenGroup(group netip.Addr, port int, ifi *net.Interface) (*net.UDPConn, error) {
	return nil, fmt.Errorf("mcast: control socket: %w", link.ErrNotSupported)
}

func dialUnicast(local netip.Addr, ifi *net.Interface) (*net.UDPConn, error) {
	return nil, fmt.Errorf("mcast: control socket: %w", link.ErrNotSupported)
}
