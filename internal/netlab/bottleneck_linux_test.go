package netlab_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce/wire"
)

// blast sends size-byte datagrams from c to dst at about rate bits/s until
// stop closes (a schedule checked every millisecond, not a sleep per
// datagram).
func blast(c *net.UDPConn, dst netip.AddrPort, rate float64, size int, stop <-chan struct{}) {
	msg := make([]byte, size)
	start := time.Now()
	sent := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		due := int(time.Since(start).Seconds() * rate / 8 / float64(size+42))
		for ; sent < due; sent++ {
			c.WriteToUDPAddrPort(msg, dst) // ENOBUFS under overload is fine: the point is to overload
		}
		time.Sleep(time.Millisecond)
	}
}

// Incast: three members blast at 1.5× the rate of member 0's bottlenecked
// leg. The bottleneck forwards at its rate (±10 % over a second), its queue
// fills to its limit and the excess is tail-dropped; member 0 receives what
// it forwarded.
func TestPrivilegedBottleneckIncastRate(t *testing.T) {
	const rate, queue, size = 100e6, 256, 1400
	s := netlab.StarT(t, netlab.StarConfig{Members: 4, Relays: map[int]netlab.RelayConfig{
		0: {Bottleneck: netlab.Bottleneck{Rate: rate, Queue: queue}},
	}})
	rcv := listenUDP(t, s.Members[0].NS, netip.AddrPortFrom(s.Members[0].IPv4, 0))
	dst := rcv.LocalAddr().(*net.UDPAddr).AddrPort()
	bigRcvBuf(rcv)
	var received int
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		// Until the blast stops, then until quiet: a starved goroutine
		// must not stop counting early.
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				received += countDatagrams(rcv)
				close(done)
				return
			default:
			}
			rcv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, _, err := rcv.ReadFromUDPAddrPort(buf); err == nil {
				received++
			}
		}
	}()
	var wg sync.WaitGroup
	for _, m := range s.Members[1:] {
		c := listenUDP(t, m.NS, netip.AddrPortFrom(m.IPv4, 0))
		wg.Go(func() { blast(c, dst, rate*0.5, size, stop) })
	}
	r := s.Relays[0]
	time.Sleep(400 * time.Millisecond) // the queue fills
	s0, t0 := r.Stats(), time.Now()
	time.Sleep(1200 * time.Millisecond)
	s1, t1 := r.Stats(), time.Now()
	close(stop)
	wg.Wait()
	<-done
	got := float64(s1.Bottleneck.Bytes-s0.Bottleneck.Bytes) * 8 / t1.Sub(t0).Seconds()
	offered := float64(s1.Received-s0.Received) * (size + 42) * 8 / t1.Sub(t0).Seconds()
	if offered < rate*1.1 {
		t.Errorf("the senders offered only %.1f Mbit/s (the machine is overloaded?): the bottleneck cannot be judged", offered/1e6)
	}
	st := r.Stats()
	t.Logf("bottleneck forwarded %.1f Mbit/s (configured %.0f); received %d datagrams; relay %+v", got/1e6, rate/1e6, received, st)
	if got < rate*0.9 || got > rate*1.1 {
		t.Errorf("bottleneck rate %.1f Mbit/s, want %.0f ±10 %%", got/1e6, rate/1e6)
	}
	b := st.Bottleneck
	if b.TailDropped == 0 || b.MaxFrames != queue || b.Marked != 0 {
		t.Errorf("queue: %d tail drops, max depth %d of %d, %d marked; want drops, a full queue, no marks", b.TailDropped, b.MaxFrames, queue, b.Marked)
	}
	// Member 0 got what the bottleneck forwarded (less a few frames of
	// kernel chatter: ND, MLD).
	if uint64(received) > b.Forwarded || uint64(received)+20 < b.Forwarded {
		t.Errorf("member 0 received %d datagrams, the bottleneck forwarded %d frames", received, b.Forwarded)
	}
}

// tosConn opens a UDP socket in ns that sends with the given IPv4 TOS / IPv6
// traffic class and reports the received one.
func tosConn(t *testing.T, ns *netlab.NS, addr netip.Addr, tos int) *net.UDPConn {
	t.Helper()
	c := listenUDP(t, ns, netip.AddrPortFrom(addr, 0))
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		if addr.Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
			}
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			}
		}
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return c
}

// receivedTOS reads c until quiet and returns, per datagram (indexed by the
// sequence number in its first 4 bytes), the TOS / traffic class it arrived
// with, or -1 for none.
func receivedTOS(t *testing.T, c *net.UDPConn, n int) []int {
	tos := make([]int, n)
	for i := range tos {
		tos[i] = -1
	}
	buf, oob := make([]byte, 65536), make([]byte, 256)
	for {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		m, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			return tos
		}
		seq := int(binary.BigEndian.Uint32(buf))
		if m < 4 || seq >= n {
			t.Errorf("stray datagram of %d bytes", m)
			continue
		}
		cms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms {
			switch {
			case cm.Header.Level == unix.IPPROTO_IP && cm.Header.Type == unix.IP_TOS && len(cm.Data) >= 1:
				tos[seq] = int(cm.Data[0])
			case cm.Header.Level == unix.IPPROTO_IPV6 && cm.Header.Type == unix.IPV6_TCLASS && len(cm.Data) >= 4:
				tos[seq] = int(binary.NativeEndian.Uint32(cm.Data))
			}
		}
	}
}

// A burst into a slow bottleneck with ECN marking, ECT(0) and not-ECT
// datagrams interleaved, over IPv4 and IPv6: the first frames (queue at or
// below MarkMin) pass unmarked, later ECT frames arrive CE (so with a valid
// IPv4 header checksum: the kernel delivered them) as often as the marked
// counter says, not-ECT frames arrive untouched, and a full queue drops the
// tail.
func TestPrivilegedBottleneckECN(t *testing.T) {
	const queue, markMin, markMax, n = 64, 8, 32, 300
	topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Bottleneck: netlab.Bottleneck{
		Rate: 20e6, Queue: queue, MarkMin: markMin, MarkMax: markMax, MarkP: 0.5,
	}})
	for _, v6 := range []bool{false, true} {
		src, dstIP := topo.A.IPv4, topo.B.IPv4
		if v6 {
			src, dstIP = topo.A.IPv6, topo.B.IPv6
		}
		before := topo.Relay.Stats().Bottleneck
		ectTx, plainTx := tosConn(t, topo.A.NS, src, 0x02), tosConn(t, topo.A.NS, src, 0)
		ectRx, plainRx := tosConn(t, topo.B.NS, dstIP, 0), tosConn(t, topo.B.NS, dstIP, 0)
		var ectTOS, plainTOS []int
		var wg sync.WaitGroup
		wg.Go(func() { ectTOS = receivedTOS(t, ectRx, n) })
		wg.Go(func() { plainTOS = receivedTOS(t, plainRx, n) })
		msg := make([]byte, 1000)
		for i := range n {
			binary.BigEndian.PutUint32(msg, uint32(i))
			ectTx.WriteToUDPAddrPort(msg, ectRx.LocalAddr().(*net.UDPAddr).AddrPort())
			plainTx.WriteToUDPAddrPort(msg, plainRx.LocalAddr().(*net.UDPAddr).AddrPort())
		}
		wg.Wait()
		st := topo.Relay.Stats().Bottleneck
		var ce, ect, lost, plain, plainLost int
		for _, v := range ectTOS {
			switch v {
			case -1:
				lost++
			case 0x03:
				ce++
			case 0x02:
				ect++
			default:
				t.Errorf("v6 %v: an ECT(0) datagram arrived with TOS %#x", v6, v)
			}
		}
		for _, v := range plainTOS {
			switch v {
			case -1:
				plainLost++
			case 0:
				plain++
			default:
				t.Errorf("v6 %v: a not-ECT datagram arrived with TOS %#x", v6, v)
			}
		}
		t.Logf("v6 %v: ECT(0) %d CE, %d unmarked, %d lost; not-ECT %d delivered, %d lost; bottleneck %+v", v6, ce, ect, lost, plain, plainLost, st)
		if uint64(ce) != st.Marked-before.Marked || ce == 0 {
			t.Errorf("v6 %v: %d datagrams arrived CE, the relay marked %d", v6, ce, st.Marked-before.Marked)
		}
		if st.ECT-before.ECT != uint64(ce+ect) {
			t.Errorf("v6 %v: relay saw %d ECT frames, %d arrived", v6, st.ECT-before.ECT, ce+ect)
		}
		// The queue holds at most MarkMin frames before the first four ECT
		// ones (every other frame is ECT), so they cannot be marked.
		for i := range markMin / 2 {
			if ectTOS[i] != 0x02 {
				t.Errorf("v6 %v: ECT datagram %d arrived with TOS %#x below the marking threshold", v6, i, ectTOS[i])
			}
		}
		// A few other frames cross the bottleneck during the burst (ARP,
		// IPv6 neighbour discovery and MLD of the namespaces) and may be
		// among the tail drops: a CI run counted 504 drops for 503 lost
		// datagrams.
		if dropped := st.TailDropped - before.TailDropped; dropped == 0 || uint64(lost+plainLost)+4 < dropped || st.MaxFrames != queue {
			t.Errorf("v6 %v: %d tail drops, %d datagrams lost, queue max %d of %d", v6, dropped, lost+plainLost, st.MaxFrames, queue)
		}
	}
}

// packetSocket opens an AF_PACKET socket on e (in its namespace).
func packetSocket(t *testing.T, e *netlab.Iface) int {
	t.Helper()
	var fd int
	err := e.NS.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval(int64(300 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// RoCEv2 WRITE frames sent ECT(0) through a bottleneck that marks every ECT
// frame once two are queued: the marked ones arrive CE and still decode
// (ICRC and IPv4 header checksum checked by wire.Packet.Decode), otherwise
// byte for byte as sent.
//
// The port drains one 586-byte frame per ~4.7 ms (1 Mbit/s) and saves up no
// more than one frame, so the queue builds from the second frame on however
// the relay is scheduled. (With the default 5 ms burst at 20 Mbit/s the first
// ~21 frames passed unqueued, and under load CI saw 14 of 40 marked.) How
// many are marked still depends on when the relay reads: the check is that
// a good share are, and that every marked one is intact.
func TestPrivilegedBottleneckRoCEMarkKeepsICRC(t *testing.T) {
	topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Bottleneck: netlab.Bottleneck{
		Rate: 1e6, Burst: 600, Queue: 100, MarkMin: 2, MarkMax: 2, MarkP: 1,
	}})
	tx, rx := packetSocket(t, topo.A), packetSocket(t, topo.B)
	// Wait until the relay reads frames (a new veth and the relay's socket
	// take a moment): probe with a local-experimental ethertype, which the
	// receive loop below skips as chatter.
	probe := make([]byte, 60)
	copy(probe, topo.B.HWAddr)
	copy(probe[6:], topo.A.HWAddr)
	binary.BigEndian.PutUint16(probe[12:], 0x88B5)
	for deadline := time.Now().Add(3 * time.Second); topo.Relay.Stats().Received == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay read no frame within 3 s")
		}
		if _, err := unix.Write(tx, probe); err != nil {
			t.Fatal(err)
		}
	}
	const n = 40
	sent := make([][]byte, n)
	for i := range n {
		p := wire.Packet{
			SrcIP: topo.A.IPv4, DstIP: topo.B.IPv4, TOS: 0x02, TTL: 64, IPFlags: wire.IPv4DontFragment,
			SrcPort: wire.SourcePort(0x11, 0x12), DstPort: wire.UDPPort,
			BTH:     wire.BTH{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQPN: 0x12, PSN: uint32(i)},
			RETH:    wire.RETH{VA: 0x1000, RKey: 0x1234, DMALen: 512},
			Payload: bytes.Repeat([]byte{byte(i)}, 512),
		}
		copy(p.DstMAC[:], topo.B.HWAddr)
		copy(p.SrcMAC[:], topo.A.HWAddr)
		buf := make([]byte, 2048)
		k, err := p.Encode(buf)
		if err != nil {
			t.Fatal(err)
		}
		sent[i] = buf[:k]
		if _, err := unix.Write(tx, sent[i]); err != nil {
			t.Fatal(err)
		}
	}
	marked, got := 0, 0
	var recvErr error
	buf := make([]byte, 4096)
	for got < n {
		k, _, err := unix.Recvfrom(rx, buf, 0)
		if errors.Is(err, unix.EINTR) {
			// A receive with SO_RCVTIMEO is not restarted after a signal,
			// and the Go runtime preempts with SIGURG (CI saw one frame,
			// then EINTR, the test over in 0.18 s).
			continue
		}
		if err != nil {
			recvErr = err // the receive timeout (EAGAIN): nothing more comes
			break
		}
		f := buf[:k]
		var p wire.Packet
		if binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
			continue // not IPv4 UDP: kernel chatter
		}
		if err := p.Decode(f); err != nil {
			t.Fatalf("frame %d after the bottleneck: %v", got, err)
		}
		psn := int(p.BTH.PSN)
		if psn >= n {
			t.Fatalf("PSN %d", psn)
		}
		got++
		want := bytes.Clone(sent[psn])
		switch p.TOS {
		case 0x03:
			marked++
			// Only the TOS and the header checksum differ.
			want[15] = f[15]
			want[24], want[25] = f[24], f[25]
		case 0x02:
		default:
			t.Errorf("PSN %d arrived with TOS %#x", psn, p.TOS)
		}
		if !bytes.Equal(f, want) {
			t.Errorf("PSN %d changed beyond the ECN bits:\n got %x\nwant %x", psn, f, want)
		}
	}
	st := topo.Relay.Stats().Bottleneck
	t.Logf("%d frames received, %d CE; bottleneck %+v", got, marked, st)
	if got != n || uint64(marked) != st.Marked || marked < n/4 {
		t.Errorf("%d of %d frames arrived (the receive ended with %v), %d CE; the relay marked %d; want all, at least %d CE", got, n, recvErr, marked, st.Marked, n/4)
	}
}
