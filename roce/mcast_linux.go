package roce

import (
	"errors"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link"
)

// ifaceJoiner joins groups for a device opened on an interface. A group is
// joined once per device.
type ifaceJoiner struct {
	ifindex int
	xdp     *bpf.Program // AF_XDP: the steering program (nil: link/udp)
	udp     interface {
		JoinGroup(netip.Addr, int) error
		LeaveGroup(netip.Addr, int) error
	}
	mu     sync.Mutex
	joined map[netip.Addr]bool
}

// newGroupJoiner returns the joiner of a device on link l over the
// interface info: nil when l can neither join itself (link/udp) nor is
// steered by an XDP program of this process (AF_XDP).
func newGroupJoiner(info *ifaceInfo, l link.Link) groupJoiner {
	j := &ifaceJoiner{ifindex: info.index, xdp: info.xdp, joined: map[netip.Addr]bool{}}
	if u, ok := l.(interface {
		JoinGroup(netip.Addr, int) error
		LeaveGroup(netip.Addr, int) error
	}); ok {
		j.udp, j.xdp = u, nil
	} else if info.xdp == nil {
		return nil
	}
	return j
}

func (j *ifaceJoiner) join(group netip.Addr) (func() error, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.joined[group] {
		return nil, errors.New("joined already")
	}
	var leave func() error
	switch {
	case !group.IsMulticast() && j.udp != nil:
		// A broadcast: the link's socket, bound to all addresses,
		// receives it as it is.
		leave = func() error { return nil }
	case !group.IsMulticast():
		if err := j.xdp.AddLocalIP(group); err != nil {
			return nil, err
		}
		leave = func() error { return j.xdp.RemoveLocalIP(group) }
	case j.udp != nil:
		if err := j.udp.JoinGroup(group, j.ifindex); err != nil {
			return nil, err
		}
		leave = func() error { return j.udp.LeaveGroup(group, j.ifindex) }
	default:
		// The membership (so the interface accepts the group's MAC, and
		// the kernel answers IGMP/MLD queries) lives on a socket of its
		// own, never bound, so it receives nothing; the program then
		// redirects the group's RoCE frames as the device's own.
		fd, err := joinSocket(group, j.ifindex)
		if err != nil {
			return nil, err
		}
		if err := j.xdp.AddLocalIP(group); err != nil {
			unix.Close(fd)
			return nil, err
		}
		leave = func() error {
			err := j.xdp.RemoveLocalIP(group)
			if cerr := unix.Close(fd); err == nil && cerr != nil {
				err = os.NewSyscallError("close", cerr)
			}
			return err
		}
	}
	j.joined[group] = true
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			err = leave()
			j.mu.Lock()
			delete(j.joined, group)
			j.mu.Unlock()
		})
		return err
	}, nil
}

func (j *ifaceJoiner) broadcast(a netip.Addr) bool { return IsBroadcastOf(j.ifindex, a) }

// joinSocket opens a UDP socket that is a member of group on the interface
// ifindex.
func joinSocket(group netip.Addr, ifindex int) (int, error) {
	fam := unix.AF_INET
	if group.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if group.Is4() {
		err = os.NewSyscallError("setsockopt IP_ADD_MEMBERSHIP", unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifindex)}))
	} else {
		err = os.NewSyscallError("setsockopt IPV6_JOIN_GROUP", unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
			&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)}))
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
