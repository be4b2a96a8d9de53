package roce

// Who holds an interface. One process at a time can receive RoCE on an
// interface: an XDP steering program takes every RoCE frame for the
// interface's addresses, and a UDP socket on port 4791 gets those the kernel
// keeps. A second process that opened anyway would send but never receive.
//
// An xdproce process announces what it holds through an abstract unix socket
// ("xdproce/xdp/IFINDEX" for the XDP hook, "xdproce/udp/IFINDEX/PORT" for the
// port on the interface: link/udp binds its socket to the interface).
// Binding that name is the lock, so two processes starting at once cannot
// both pass the check; the abstract namespace belongs to the network
// namespace, which is the scope of an ifindex and a port; the name goes away
// with the process, however it ends; and no writable directory is needed
// (a binary with file capabilities run by a user cannot create
// /run/xdproce). A process that connects learns the holder's PID from
// SO_PEERCRED and what it holds from the one line the holder writes.
// Holders that are not xdproce (another XDP program, another UDP socket) are
// found through /proc, as far as this process may read other processes'
// file descriptors; UDP sockets through sock_diag, which says the interface
// a socket is bound to.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
)

// holdQueryTimeout bounds asking a holder what it holds.
const holdQueryTimeout = time.Second

func xdpLockName(ifindex int) string { return "@xdproce/xdp/" + strconv.Itoa(ifindex) }
func udpLockName(ifindex, port int) string {
	return "@xdproce/udp/" + strconv.Itoa(ifindex) + "/" + strconv.Itoa(port)
}

// holdLock is a claimed abstract socket name; it answers every connection
// with what this process holds.
type holdLock struct {
	ln    *net.UnixListener
	holds atomic.Pointer[string]
}

// takeLock claims name for this process. When another process has it, it
// returns that process as a *HeldError.
func takeLock(name, holds string) (*holdLock, error) {
	for try := 0; ; try++ {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			l := &holdLock{ln: ln}
			l.setHolds(holds)
			go l.serve()
			return l, nil
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("claim %s: %w", name[1:], err)
		}
		if h := queryLock(name); h != nil {
			return nil, &HeldError{Holder: *h}
		}
		if try == 2 { // the holder keeps going away and coming back
			return nil, fmt.Errorf("claim %s: %w", name[1:], err)
		}
	}
}

func (l *holdLock) setHolds(s string) { l.holds.Store(&s) }

func (l *holdLock) serve() {
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		c.SetWriteDeadline(time.Now().Add(holdQueryTimeout))
		c.Write([]byte(*l.holds.Load() + "\n"))
		c.Close()
	}
}

func (l *holdLock) close() error {
	if l == nil {
		return nil
	}
	return l.ln.Close()
}

// queryLock asks the process holding name who it is; nil when no process
// holds it.
func queryLock(name string) *Holder {
	c, err := net.DialTimeout("unix", name, holdQueryTimeout)
	if err != nil {
		return nil
	}
	defer c.Close()
	h := &Holder{}
	if raw, err := c.(*net.UnixConn).SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				h.PID = int(cred.Pid) // 0 when the holder is in a PID namespace we cannot see
			}
		})
	}
	c.SetReadDeadline(time.Now().Add(holdQueryTimeout))
	line, _ := io.ReadAll(io.LimitReader(c, 512))
	h.Holds = strings.TrimSpace(string(line))
	h.Command = commandLine(h.PID)
	return h
}

// xskHolder finds who keeps the interface from AF_XDP: an xdproce process
// that announced it, another XDP program, or a process bound to the RoCE UDP
// port on one of its addresses (the steering program would take its frames).
// ownLock says that this process holds the interface's name itself. Nil when
// nobody does.
func xskHolder(info *ifaceInfo, ownLock bool) *Holder {
	if !ownLock {
		if h := queryLock(xdpLockName(info.index)); h != nil {
			return h
		}
	}
	if h := xdpHolder(info.index); h != nil {
		return h
	}
	return udpHolder(info.index, info.addrs, udpPortDefault)
}

// udpPortDefault is the RoCEv2 port, the one the steering program steers.
const udpPortDefault = 4791

// xdpHolder reports the process holding the XDP program attached to the
// interface, nil when none is attached.
func xdpHolder(ifindex int) *Holder {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		return nil
	}
	id := l.Attrs().Xdp.ProgId
	h := &Holder{Holds: fmt.Sprintf("XDP program id %d", id)}
	if name := bpf.NameOf(id); name != "" {
		h.Holds = fmt.Sprintf("XDP program %s (id %d)", name, id)
	}
	want := "prog_id:\t" + strconv.FormatUint(uint64(id), 10)
	pid := fdOwner(func(target string) bool {
		return target == "anon_inode:bpf_link" || target == "anon_inode:bpf-prog"
	}, func(fdinfo string) bool {
		for line := range strings.SplitSeq(fdinfo, "\n") {
			if line == want {
				return true
			}
		}
		return false
	})
	if pid > 0 {
		h.PID, h.Command = pid, commandLine(pid)
	} else {
		h.Command = "no process found: pinned, attached with 'ip link', or held by a process this one may not inspect"
	}
	return h
}

// udpHolder reports the process bound to the UDP port where it takes frames
// that arrive on the interface ifindex: on one of addrs or the unspecified
// address (any address when addrs is empty), with the socket bound to that
// interface or to none (sockets bound to other interfaces do not compete).
// Nil when none is.
func udpHolder(ifindex int, addrs []netip.Addr, port int) *Holder {
	s, ok := findUDPSocket(ifindex, addrs, port)
	if !ok {
		return nil
	}
	holds := fmt.Sprintf("UDP port %d on %s", port, s.addr)
	if s.ifindex == ifindex { // an xdproce device's socket is bound to its interface
		if h := queryLock(udpLockName(ifindex, port)); h != nil {
			h.Holds = holds
			return h
		}
	}
	h := &Holder{Holds: holds}
	target := "socket:[" + strconv.FormatUint(uint64(s.inode), 10) + "]"
	if pid := fdOwner(func(t string) bool { return t == target }, nil); pid > 0 {
		h.PID, h.Command = pid, commandLine(pid)
	} else if s.uid == 0 && os.Geteuid() == 0 {
		h.Command = "no process: a kernel socket (rdma_rxe?)"
	} else {
		h.Command = "uid " + strconv.FormatUint(uint64(s.uid), 10)
	}
	return h
}

type udpSocket struct {
	addr    netip.Addr
	ifindex int // the interface it is bound to, 0 none
	uid     uint32
	inode   uint32
}

// findUDPSocket asks the kernel (sock_diag, in this thread's network
// namespace) for a UDP socket bound to port on one of addrs or the
// unspecified address, and to the interface ifindex or none.
func findUDPSocket(ifindex int, addrs []netip.Addr, port int) (udpSocket, bool) {
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, _ := netlink.SocketDiagUDP(fam) // a dump cut short still lists sockets
		for _, s := range socks {
			dev := int(s.ID.Interface)
			if int(s.ID.SourcePort) != port || dev != 0 && dev != ifindex {
				continue
			}
			a, ok := netip.AddrFromSlice(s.ID.Source)
			if !ok {
				continue
			}
			a = a.Unmap()
			if a.IsUnspecified() || len(addrs) == 0 || containsAddr(addrs, a) {
				return udpSocket{addr: a, ifindex: dev, uid: s.UID, inode: s.INode}, true
			}
		}
	}
	return udpSocket{}, false
}

func containsAddr(addrs []netip.Addr, a netip.Addr) bool {
	for _, b := range addrs {
		if b.Unmap().WithZone("") == a {
			return true
		}
	}
	return false
}

// fdOwner returns the first process with a file descriptor whose link target
// matches target and, when fdinfo is not nil, whose /proc fdinfo matches
// fdinfo; 0 when none is found among the processes this one may inspect.
func fdOwner(target func(string) bool, fdinfo func(string) bool) int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name())
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			t, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || !target(t) {
				continue
			}
			if fdinfo == nil {
				return pid
			}
			if b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name())); err == nil && fdinfo(string(b)) {
				return pid
			}
		}
	}
	return 0
}

// commandLine returns the process's command line with the program's base
// name, shortened to 120 bytes; "" when it cannot be read.
func commandLine(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	args[0] = filepath.Base(args[0])
	s := strings.Join(args, " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
