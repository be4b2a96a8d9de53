package xsk_test

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
)

// openTap creates tap device name in ns, owned by the returned file (frames
// written to it arrive on the interface; frames the interface sends are read
// from it), addressed with ip/24 and up.
func openTap(t *testing.T, ns *netlab.NS, name string, ip netip.Addr, mtu int) (*os.File, *netlab.Iface) {
	t.Helper()
	var f *os.File
	err := ns.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		var ifr struct {
			name  [unix.IFNAMSIZ]byte
			flags uint16
			_     [22]byte
		}
		copy(ifr.name[:], name)
		ifr.flags = unix.IFF_TAP | unix.IFF_NO_PI
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			unix.Close(fd)
			return e
		}
		f = os.NewFile(uintptr(fd), "tap")
		return nil
	})
	if err != nil {
		t.Skipf("no tap device: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	for _, args := range [][]string{
		{"link", "set", "dev", name, "mtu", "9000"},
		{"addr", "add", ip.String() + "/24", "dev", name},
		{"link", "set", "dev", name, "up"},
	} {
		if args[len(args)-1] == "9000" {
			args[len(args)-1] = strconv.Itoa(mtu)
		}
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	e := &netlab.Iface{NS: ns, Name: name, IPv4: ip, MTU: mtu}
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		e.Index, e.HWAddr = ifi.Index, ifi.HardwareAddr
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return f, e
}

// AF_XDP on a tap device (the interop peer, a QEMU guest, sits behind one):
// frames written into the tap reach the socket through the steering program,
// and frames the socket sends come out of the tap.
func TestPrivilegedTap(t *testing.T) {
	netlab.Privileged(t)
	for _, mtu := range []int{1500, 9000} {
		for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
			t.Run(strconv.Itoa(mtu)+"/"+mode.String(), func(t *testing.T) {
				lab := netlab.NewT(t)
				ns, err := lab.AddNS("tap")
				if err != nil {
					t.Fatal(err)
				}
				f, tap := openTap(t, ns, "xtap0", netip.MustParseAddr("198.51.100.1"), mtu)
				me := openEnd(t, tap, mode, nil)
				// The peer behind the tap.
				peer := &netlab.Iface{Name: "peer", HWAddr: net.HardwareAddr{0x02, 0x52, 0x50, 0, 0, 2}, IPv4: netip.MustParseAddr("198.51.100.2")}
				sizes := []int{60, 1500 + 14}
				if mtu == 9000 {
					sizes = append(sizes, pmtu4096Frame, 9000+14)
				}
				rx := make([][]byte, 16)
				for i, n := range sizes {
					// Peer → tap → XDP → socket.
					in := putRoCE(make([]byte, n), peer, tap, uint32(i), n)
					if _, err := f.Write(in); err != nil {
						t.Fatalf("write %d bytes into the tap: %v", n, err)
					}
					deadline := time.Now().Add(3 * time.Second)
					for {
						k, err := me.Sock.Receive(rx)
						if err != nil {
							t.Fatal(err)
						}
						if k == 1 && bytes.Equal(rx[0], in) {
							break
						}
						if k != 0 {
							t.Fatalf("%d-byte frame: received %d frames (first %d bytes)", n, k, len(rx[0]))
						}
						if time.Now().After(deadline) {
							c, _ := me.Prog.Counters()
							t.Fatalf("%d-byte frame not received; counters %v", n, c)
						}
						me.Sock.Wait(50 * time.Millisecond)
					}
					// Socket → tap → peer.
					bufs := make([][]byte, 1)
					if me.Sock.Alloc(bufs) != 1 {
						t.Fatal("Alloc gave no buffer")
					}
					bufs[0] = putRoCE(bufs[0], tap, peer, uint32(100+i), n)
					want := append([]byte(nil), bufs[0]...)
					if err := me.Sock.Send(bufs[:1]); err != nil {
						t.Fatal(err)
					}
					f.SetReadDeadline(time.Now().Add(3 * time.Second))
					buf := make([]byte, 10000)
					for {
						m, err := f.Read(buf)
						if err != nil {
							st, _ := me.Sock.Stats()
							out, _ := ns.Command(t.Context(), "ip", "-s", "link", "show", "xtap0").CombinedOutput()
							t.Fatalf("%d-byte frame from the socket not seen on the tap: %v; stats %+v\n%s", n, err, st, out)
						}
						if bytes.Equal(buf[:m], want) {
							break
						}
						// Anything else is the kernel's own chatter (IPv6 ND, ...).
					}
				}
				c, err := me.Prog.Counters()
				if err != nil {
					t.Fatal(err)
				}
				if c[bpf.Redirected].Packets != uint64(len(sizes)) {
					t.Errorf("redirected %d, want %d", c[bpf.Redirected].Packets, len(sizes))
				}
			})
		}
	}
}
