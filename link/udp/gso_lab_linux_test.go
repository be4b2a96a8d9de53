//go:build linux

package udp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/udp"
)

// openInNS opens a link inside e's namespace, bound to addr.
func openInNS(t testing.TB, e *netlab.Iface, cfg udp.Config) *udp.Link {
	t.Helper()
	var l *udp.Link
	if err := e.NS.Do(func() error {
		var err error
		l, err = udp.Open(cfg)
		return err
	}); err != nil {
		t.Fatalf("udp.Open(%+v) in %s: %v", cfg, e.NS.Short, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ethtool runs ethtool -K on e with args.
func ethtool(t *testing.T, e *netlab.Iface, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := e.NS.Command(ctx, "ethtool", append([]string{"-K", e.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ethtool -K %s %v: %v: %s", e.Name, args, err, out)
	}
}

// capture collects the RoCEv2 frames (UDP to 4791) that arrive on e, with
// an AF_PACKET socket in e's namespace, until stop is closed.
type capture struct {
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
}

func startCapture(t *testing.T, e *netlab.Iface) (*capture, func()) {
	t.Helper()
	var fd int
	if err := e.NS.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index})
	}); err != nil {
		t.Fatalf("packet socket on %s: %v", e.Name, err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	c := &capture{done: make(chan struct{})}
	var stop sync.Once
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		buf := make([]byte, 1<<17)
		for {
			select {
			case <-c.done:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
			if err != nil || n < 42 {
				continue
			}
			f := buf[:min(n, len(buf))]
			if isRoCE(f) {
				c.mu.Lock()
				c.frames = append(c.frames, append([]byte(nil), f...))
				c.mu.Unlock()
			}
		}
	}()
	end := func() {
		stop.Do(func() { close(c.done); <-finished; unix.Close(fd) })
	}
	t.Cleanup(end)
	return c, end
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// isRoCE reports whether f is Ethernet/IPv4 or IPv6/UDP to port 4791.
func isRoCE(f []byte) bool {
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xf) * 4
		return f[23] == 17 && len(f) >= 14+ihl+8 && binary.BigEndian.Uint16(f[14+ihl+2:]) == 4791
	case 0x86dd:
		return len(f) >= 62 && f[20] == 17 && binary.BigEndian.Uint16(f[56:]) == 4791
	}
	return false
}

// independentICRC computes the RoCEv2 ICRC of an Ethernet frame from the
// spec, with hash/crc32 (not roce/wire): CRC-32 over 8 bytes of ones, the IP
// header with TOS/traffic class, flow label, TTL/hop limit and header
// checksum set to ones, the UDP header with its checksum set to ones, the
// BTH with byte 4 set to ones, and the rest up to the ICRC; it returns that
// and the ICRC the frame carries (little-endian after the payload).
func independentICRC(f []byte) (computed, carried uint32) {
	ip := f[14:]
	var ipLen, end int
	if ip[0]>>4 == 4 {
		ipLen = int(ip[0]&0xf) * 4
		end = int(binary.BigEndian.Uint16(ip[2:]))
	} else {
		ipLen = 40
		end = 40 + int(binary.BigEndian.Uint16(ip[4:]))
	}
	hdr := append(bytes.Repeat([]byte{0xff}, 8), ip[:ipLen+8+12]...)
	h := hdr[8:]
	if ipLen == 40 {
		h[0] |= 0x0f
		h[1], h[2], h[3] = 0xff, 0xff, 0xff
		h[7] = 0xff
	} else {
		h[1] = 0xff
		h[8] = 0xff
		h[10], h[11] = 0xff, 0xff
	}
	h[ipLen+6], h[ipLen+7] = 0xff, 0xff
	h[ipLen+8+4] = 0xff
	crc := crc32.ChecksumIEEE(hdr)
	crc = crc32.Update(crc, crc32.IEEETable, ip[ipLen+8+12:end-4])
	return crc, binary.LittleEndian.Uint32(ip[end-4:])
}

// TestPrivilegedGSOWireICRC proves the Identification rule on the wire:
// with tx-udp-segmentation off on the sending veth the kernel cuts each
// UDP_SEGMENT message in software before the device, so a packet socket on
// the peer sees the segments as they would leave a NIC. Every captured
// frame carries an ICRC that an independent CRC-32 accepts over its real
// IP header, the IPv4 IDs count 0, 1, … within each message, and the
// receiving link delivers the frames sent.
func TestPrivilegedGSOWireICRC(t *testing.T) {
	testenv.Privileged(t)
	testenv.Tool(t, "ethtool", "install ethtool")
	for _, mtu := range []int{1500, 9000} {
		t.Run("mtu="+itoa(mtu), func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
			ethtool(t, topo.A, "tx-udp-segmentation", "off")
			size := 1024
			if mtu == 9000 {
				size = 4096
			}
			for _, fam := range []string{"IPv4", "IPv6"} {
				src, dst := topo.A.IPv4, topo.B.IPv4
				if fam == "IPv6" {
					src, dst = topo.A.IPv6, topo.B.IPv6
				}
				a := openInNS(t, topo.A, udp.Config{Addr: src})
				b := openInNS(t, topo.B, udp.Config{Addr: dst})
				c, stop := startCapture(t, topo.B)
				// 40 frames: messages of min(64, 65507/size) frames, the
				// last frame 300 bytes shorter; then one lone frame.
				sent := gsoRun(t, src, dst, a.Props().SrcPort, 40, size, 300, func(int) uint8 { return 0 })
				sendAll(t, a, sent)
				lone := gsoRun(t, src, dst, a.Props().SrcPort, 1, 100, 0, func(int) uint8 { return 0 })
				sendAll(t, a, lone)
				got := recvN(t, b, 41)
				for i, g := range got {
					sameRoCE(t, g, append(sent, lone...)[i])
				}
				time.Sleep(50 * time.Millisecond)
				stop()
				c.mu.Lock()
				frames := c.frames
				c.mu.Unlock()
				if len(frames) != 41 {
					t.Fatalf("%s: captured %d RoCEv2 frames on %s, want 41", fam, len(frames), topo.B.Name)
				}
				per := min(64, (65535-28)/(size+28))
				for i, f := range frames {
					if len(f) > mtu+14 {
						t.Fatalf("%s: frame %d is %d bytes: not segmented before the device", fam, i, len(f))
					}
					computed, carried := independentICRC(f)
					if computed != carried {
						t.Errorf("%s: frame %d (%d bytes): ICRC %08x, computed %08x\n% x", fam, i, len(f), carried, computed, f[:64])
					}
					if fam == "IPv4" {
						wantID := uint16(i % per)
						if i == 40 {
							wantID = 0
						}
						if id := binary.BigEndian.Uint16(f[18:]); id != wantID || f[20]&0x40 == 0 {
							t.Errorf("frame %d: IPv4 ID %d flags %#x, want ID %d with DF", i, id, f[20]>>5, wantID)
						}
					}
				}
				if s := a.Stats(); s.TxGSOSends == 0 {
					t.Errorf("%s: no GSO message sent: %+v", fam, s)
				}
				t.Logf("%s: %d frames captured, all ICRCs verified independently; sender %+v", fam, len(frames), a.Stats())
				a.Close()
				b.Close()
			}
		})
	}
}

// TestPrivilegedGSOFallbackRelay runs in the relay lab, whose devices have
// checksum and segmentation offloads off. Since Linux 6.11 the kernel takes
// UDP_SEGMENT there anyway (it checksums the segments in software); before,
// it refuses with EIO. Either way the data arrives byte-exact, with valid
// ICRCs, and a refusal is said once at info level. Then a refusal forced on
// any kernel (no UDP checksums: EINVAL) on a link bound to one address and
// on one bound to all: GSO turns off after the first message, said once,
// and every frame goes out as a plain datagram, byte-exact.
func TestPrivilegedGSOFallbackRelay(t *testing.T) {
	topo := netlab.Relayed(t, netlab.LinkConfig{MTU: 1500}, netlab.RelayConfig{})
	var uts unix.Utsname
	unix.Uname(&uts)
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &major, &minor)
	newKernel := major > 6 || major == 6 && minor >= 11
	for _, tc := range []struct {
		name     string
		wildcard bool
		refuse   bool
	}{{"OffloadsOff", false, false}, {"RefusedBound", false, true}, {"RefusedWildcard", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var logBuf bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logBuf}, nil))
			cfg := udp.Config{Addr: topo.A.IPv4, Logger: logger}
			if tc.wildcard {
				cfg.Addr, cfg.MTU = netip.Addr{}, 1500
			}
			a := openInNS(t, topo.A, cfg)
			b := openInNS(t, topo.B, udp.Config{Addr: topo.B.IPv4})
			if tc.refuse {
				if err := udp.DisableUDPChecksum(a); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				sent := gsoRun(t, topo.A.IPv4, topo.B.IPv4, a.Props().SrcPort, 30, 1024, 10, func(int) uint8 { return 0 })
				sendAll(t, a, sent)
				got := recvN(t, b, len(sent))
				for i := range got {
					sameRoCE(t, got[i], sent[i])
				}
			}
			a.Close()
			b.Close()
			mu.Lock()
			log := logBuf.String()
			mu.Unlock()
			s := a.Stats()
			if s.TxFrames != 90 || s.TxErrors+s.TxDropped != 0 {
				t.Errorf("sender %+v: want 90 frames sent, no errors", s)
			}
			accepted := !tc.refuse && newKernel
			switch {
			case accepted && (s.TxGSOSends != 3 || log != ""):
				t.Errorf("Linux %d.%d takes UDP_SEGMENT without checksum offload: got %d GSO messages, log %q", major, minor, s.TxGSOSends, log)
			case !accepted && (s.TxGSOSends != 0 || strings.Count(log, "GSO off") != 1 || !strings.Contains(log, "level=INFO")):
				t.Errorf("%d GSO messages, log %q: want none and one info line saying GSO is off", s.TxGSOSends, log)
			}
			t.Logf("sender %+v; log %q", s, strings.TrimSpace(log))
		})
	}
}

// sameRoCE checks that frame got, delivered by a link, carries the UDP
// payload of want up to the ICRC, and an ICRC that verifies over got's
// headers (the ICRC itself differs when the kernel gave the frame another
// IPv4 ID than want's).
func sameRoCE(t *testing.T, got, want []byte) {
	t.Helper()
	off := 42
	if binary.BigEndian.Uint16(want[12:]) == 0x86dd {
		off = 62
	}
	if len(got) != len(want) || !bytes.Equal(got[off:len(got)-4], want[off:len(want)-4]) {
		t.Fatalf("delivered frame (%d bytes) differs from the one sent (%d bytes)", len(got), len(want))
	}
	if computed, carried := independentICRC(got); computed != carried {
		t.Fatalf("delivered frame: ICRC %08x, computed %08x", carried, computed)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
