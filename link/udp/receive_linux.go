package udp

import (
	"encoding/binary"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/wire"
)

// Receive takes up to len(frames) (at most Config.Batch) datagrams from the
// socket without blocking and returns them as whole frames with rebuilt
// headers. They stay valid until the next Receive call.
func (l *Link) Receive(frames [][]byte) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	n := min(len(frames), l.batch)
	if n == 0 {
		return 0, nil
	}
	if l.gro {
		return l.receiveGRO(frames[:n])
	}
	r, err := l.recv(n, l.rxMax)
	if err != nil || r == 0 {
		return 0, err
	}
	k := 0
	for i := range r {
		f, ok := l.frame(i)
		if !ok {
			continue
		}
		frames[k] = f
		l.rxChecked[k] = l.checked
		k++
	}
	l.rxStats.frames.Add(uint64(k))
	return k, nil
}

// ICRCChecked reports whether frame i of the last Receive had its ICRC
// verified here (link.ICRCChecker): every IPv4 frame whose Identification
// rebuild recovered, since recovering it computes the ICRC and compares it
// with the frame's. IPv6 frames (no Identification) and frames no
// Identification explains are left to the engine's check.
func (l *Link) ICRCChecked(i int) bool {
	return i >= 0 && i < len(l.rxChecked) && l.rxChecked[i]
}

// recv receives up to n messages of up to size bytes each without blocking
// (the iovecs point at the receive slots, or the coalescing buffers with
// UDP_GRO).
func (l *Link) recv(n, size int) (int, error) {
	for i := range n {
		h := &l.rxHdrs[i]
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(cmsgRoom)
		h.Hdr.Flags = 0
		h.Len = 0
		if !l.gro {
			l.rxIov[i].SetLen(size) // with UDP_GRO layoutGRO set the iovecs
		}
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.rxHdrs[0])),
		uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		return int(r), nil
	case unix.EAGAIN, unix.EINTR:
		return 0, nil
	default:
		return 0, os.NewSyscallError("recvmmsg", e)
	}
}

// frame rebuilds the headers in front of datagram i.
func (l *Link) frame(i int) ([]byte, bool) {
	h := &l.rxHdrs[i]
	if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
		l.rxStats.truncated.Add(1)
		return nil, false
	}
	return l.rebuild(i, l.rxSlots[i], int(h.Len), 0)
}

// rebuild writes the headers in front of the n payload bytes at
// slot[headroom:], a datagram that came in message i as segment seg (0 when
// not coalesced). It sets l.checked when it verified the frame's ICRC.
func (l *Link) rebuild(i int, slot []byte, n int, seg uint16) ([]byte, bool) {
	l.checked = false
	// Source from the name, destination from the packet info.
	var src, dst [16]byte
	var sport uint16
	v4 := false
	name := &l.rxNames[i]
	switch name.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		copy(src[12:], sa.Addr[:])
		sport = binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		v4 = true
	case unix.AF_INET6:
		src = name.Addr
		sport = binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&name.Port))[:])
		v4 = isMapped(src[:])
	default:
		l.rxStats.invalid.Add(1)
		return nil, false
	}
	if !l.destination(i, &dst, v4) {
		l.rxStats.invalid.Add(1)
		return nil, false
	}
	payload := headroom
	if v4 {
		start := payload - 42
		f := slot[start : payload+n]
		clear(f[:12])
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := f[14:34]
		ip[0], ip[1] = 0x45, l.receivedTOS(i)
		binary.BigEndian.PutUint16(ip[2:], uint16(28+n))
		binary.BigEndian.PutUint32(ip[4:], 0x00004000) // ID 0, DF
		ip[8], ip[9] = 64, unix.IPPROTO_UDP
		ip[10], ip[11] = 0, 0
		copy(ip[12:16], src[12:])
		copy(ip[16:20], dst[12:])
		binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip))
		putUDP(f[34:42], sport, n)
		// The kernel hid the sender's Identification, which the ICRC
		// covers: recover it from the ICRC (rxe sends a counter, UDP
		// sockets 0, or k for segment k of a UDP_SEGMENT message: tried
		// first) so the frame is the one sent, in captures too. A frame no
		// Identification explains was sent with a wrong ICRC, which a
		// sender of this package moved by its segment's Identification
		// (wire.MoveIPv4ID keeps the error): that move is undone, so the
		// frame arrives as sent, with 0, and fails the engine's ICRC check.
		// Recovering it verifies the ICRC (ok: right for the Identification
		// now in the frame), which the engine then skips (ICRCChecked).
		// Sixteen unknown bits against a 32-bit check: one wrong ICRC in
		// 65536 is explained by some Identification and passes, where the
		// engine's own check on a link that keeps the field would catch
		// it. Corruption on the wire is caught before (Ethernet's FCS, the
		// UDP checksum when the sender sets one); what is left is a sender
		// computing a wrong ICRC.
		id, ok := wire.RecoverIPv4IDGuessInPlace(f, seg)
		l.checked = ok
		if ok && id != 0 {
			wire.SetIPv4ID(f, id)
			l.rxStats.idRecovered.Add(1)
		} else if !ok && seg != 0 {
			wire.MoveIPv4ID(f, seg)
			wire.SetIPv4ID(f, 0)
		}
		return f, true
	}
	f := slot[:payload+n]
	clear(f[:12])
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	ip := f[14:54]
	binary.BigEndian.PutUint32(ip[0:], 0x60000000|uint32(l.receivedTOS(i))<<20)
	binary.BigEndian.PutUint16(ip[4:], uint16(8+n))
	ip[6], ip[7] = unix.IPPROTO_UDP, 64
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	putUDP(f[54:62], sport, n)
	return f, true
}

func putUDP(u []byte, sport uint16, n int) {
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], Port)
	binary.BigEndian.PutUint16(u[4:], uint16(8+n))
	u[6], u[7] = 0, 0
}

func isMapped(a []byte) bool {
	for _, b := range a[:10] {
		if b != 0 {
			return false
		}
	}
	return a[10] == 0xff && a[11] == 0xff
}

// destination finds the datagram's destination address in message i's
// control data (IP_PKTINFO or IPV6_PKTINFO), falling back to the bound
// address.
func (l *Link) destination(i int, dst *[16]byte, v4 bool) bool {
	ctl := l.control(i)
	for off := 0; ; {
		cm, data, next := nextCmsg(ctl, off)
		if cm == nil {
			break
		}
		off = next
		switch {
		case cm.Level == unix.IPPROTO_IP && cm.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			*dst = [16]byte{10: 0xff, 11: 0xff}
			copy(dst[12:], pi.Addr[:])
			return true
		case cm.Level == unix.IPPROTO_IPV6 && cm.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			*dst = pi.Addr
			return isMapped(dst[:]) == v4
		}
	}
	if l.local.IsValid() && !l.local.IsUnspecified() && l.local.Is4() == v4 {
		*dst = l.local.As16()
		return true
	}
	return false
}

// control returns the control data received with message i.
func (l *Link) control(i int) []byte {
	h := &l.rxHdrs[i].Hdr
	return l.rxCtl[i*cmsgRoom : i*cmsgRoom+min(int(h.Controllen), cmsgRoom)]
}

// nextCmsg returns the control message at off in ctl, its data and the
// offset of the next one; nil at the end or at a malformed header.
func nextCmsg(ctl []byte, off int) (cm *unix.Cmsghdr, data []byte, next int) {
	if off+unix.SizeofCmsghdr > len(ctl) {
		return nil, nil, 0
	}
	cm = (*unix.Cmsghdr)(unsafe.Pointer(&ctl[off]))
	cl := int(cm.Len)
	if cl < unix.SizeofCmsghdr || off+cl > len(ctl) {
		return nil, nil, 0
	}
	return cm, ctl[off+unix.CmsgLen(0) : off+cl], off + unix.CmsgSpace(cl-unix.CmsgLen(0))
}
