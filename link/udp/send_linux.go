package udp

import (
	"encoding/binary"
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link"
)

// Per-frame Send errors (package values: no allocation on the frame path).
var (
	errForeign = errors.New("udp: send: buffer not from this link's Alloc, or already handed back")
	errFrame   = errors.New("udp: send: frame is not Ethernet/IPv4 or IPv6/UDP")
	errFamily  = errors.New("udp: send: IPv6 frame on an IPv4 socket")
)

// Alloc hands out free transmit buffers of MaxFrame bytes.
func (l *Link) Alloc(bufs [][]byte) int {
	if l.closed.Load() {
		return 0
	}
	return l.pool.Alloc(bufs)
}

// Free hands back unsent buffers from Alloc; other slices are ignored.
func (l *Link) Free(bufs [][]byte) {
	for _, b := range bufs {
		l.pool.Put(b)
	}
}

// Send passes the UDP payloads of the frames to the kernel, addressed to
// each frame's destination IP at the remote port, and returns the buffers to
// the link. With GSO on (the default), runs of frames to one destination
// from one source with one TOS and one size (the last may be shorter) leave
// as one UDP_SEGMENT message each (gso_linux.go). Frames the kernel cannot
// take at once (socket buffer full) are dropped and counted, as a NIC drops
// on a full ring. It returns link.ErrClosed after Close; an error for a frame
// that is not Ethernet/IP/UDP or not from Alloc; and the first error the
// kernel gave for a frame (other frames are still sent).
func (l *Link) Send(frames [][]byte) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		for _, f := range frames {
			l.pool.Put(f)
		}
		return link.ErrClosed
	}
	if l.gso.Load() {
		return l.sendGSO(frames)
	}
	return l.sendPlain(frames, true)
}

// sendPlain sends one datagram per frame; put says whether the frames are
// still to be handed back to the pool (they are not when GSO falls back).
func (l *Link) sendPlain(frames [][]byte, put bool) error {
	var err error
	k := 0
	for _, f := range frames {
		if put && !l.pool.Put(f) {
			l.txStats.invalid.Add(1)
			err = errForeign
			continue
		}
		// The buffer's bytes stay as they are until the next Alloc, so
		// the kernel may read them below.
		if e := l.prepare(k, f); e != nil {
			l.txStats.invalid.Add(1)
			err = e
			continue
		}
		k++
		if k == l.batch {
			if e := l.flush(k); e != nil && err == nil {
				err = e
			}
			k = 0
		}
	}
	if e := l.flush(k); e != nil && err == nil {
		err = e
	}
	return err
}

// prepare fills message i with frame f's destination and payload.
func (l *Link) prepare(i int, f []byte) error {
	ft, err := parseFrame(f)
	if err != nil {
		return err
	}
	if !ft.v4 && !l.v6 {
		return errFamily
	}
	ctl := l.txCtl[i*cmsgRoom : (i+1)*cmsgRoom]
	l.address(&l.txNames[i], ctl, &ft)
	off := 0
	if l.pktinfo {
		off = unix.CmsgSpace(unix.SizeofInet6Pktinfo)
	}
	off = putTOS(ctl, off, ft.tos, ft.v4)
	h := &l.txHdrs[i].Hdr
	h.Control = nil
	if off > 0 {
		h.Control = &ctl[0]
	}
	h.SetControllen(off)
	if len(ft.payload) == 0 {
		l.txIov[i].Base = nil
	} else {
		l.txIov[i].Base = &ft.payload[0]
	}
	l.txIov[i].SetLen(len(ft.payload))
	return nil
}

// address writes the socket address of ft's destination at the remote port
// into name and, when the socket is bound to all addresses, ft's source into
// the IPV6_PKTINFO message at the start of ctl (its header already there).
func (l *Link) address(name *unix.RawSockaddrInet6, ctl []byte, ft *frameInfo) {
	switch {
	case ft.v4 && l.v6:
		*name = unix.RawSockaddrInet6{Family: unix.AF_INET6}
		name.Addr[10], name.Addr[11] = 0xff, 0xff
		copy(name.Addr[12:], ft.dst[12:])
	case ft.v4:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET}
		copy(sa.Addr[:], ft.dst[12:])
	default:
		*name = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ft.dst}
	}
	if l.pktinfo {
		pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&ctl[unix.CmsgLen(0)]))
		*pi = unix.Inet6Pktinfo{Addr: ft.src}
		if ft.v4 {
			pi.Addr = [16]byte{10: 0xff, 11: 0xff}
			copy(pi.Addr[12:], ft.src[12:])
		}
	}
	// sin_port / sin6_port sit at the same offset, in network order.
	p := (*[2]byte)(unsafe.Pointer(&name.Port))
	binary.BigEndian.PutUint16(p[:], l.rport)
}

// frameInfo is what Send needs from a frame.
type frameInfo struct {
	v4       bool
	tos      byte     // IPv4 TOS or IPv6 traffic class
	src, dst [16]byte // IPv4 addresses in the last 4 bytes
	payload  []byte   // the UDP payload, aliasing the frame
}

// parseFrame reads an Ethernet (one optional 802.1Q/802.1ad tag) / IPv4 or
// IPv6 / UDP frame. It does not allocate and accepts no IPv4 fragments, no
// IPv6 extension headers, and no lengths beyond the frame (Ethernet padding
// after the IP packet is ignored).
func parseFrame(f []byte) (frameInfo, error) {
	var ft frameInfo
	if len(f) < 14 {
		return ft, errFrame
	}
	et := binary.BigEndian.Uint16(f[12:])
	off := 14
	if et == 0x8100 || et == 0x88a8 {
		if len(f) < 18 {
			return ft, errFrame
		}
		et = binary.BigEndian.Uint16(f[16:])
		off = 18
	}
	ip := f[off:]
	var udp []byte
	switch et {
	case 0x0800:
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP {
			return ft, errFrame
		}
		ihl := int(ip[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		frag := binary.BigEndian.Uint16(ip[6:])
		if ihl < 20 || tot < ihl+8 || tot > len(ip) || frag&0x3fff != 0 {
			return ft, errFrame
		}
		udp = ip[ihl:tot]
		ft.v4 = true
		ft.tos = ip[1]
		copy(ft.src[12:], ip[12:16])
		copy(ft.dst[12:], ip[16:20])
	case 0x86dd:
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != unix.IPPROTO_UDP {
			return ft, errFrame
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl < 8 || 40+pl > len(ip) {
			return ft, errFrame
		}
		udp = ip[40 : 40+pl]
		ft.tos = byte(binary.BigEndian.Uint16(ip[0:]) >> 4)
		copy(ft.src[:], ip[8:24])
		copy(ft.dst[:], ip[24:40])
	default:
		return ft, errFrame
	}
	ul := int(binary.BigEndian.Uint16(udp[4:]))
	if ul < 8 || ul > len(udp) {
		return ft, errFrame
	}
	ft.payload = udp[8:ul]
	return ft, nil
}

// flush sends the first n prepared messages.
func (l *Link) flush(n int) error {
	var err error
	for sent := 0; sent < n; {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&l.txHdrs[sent])),
			uintptr(n-sent), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			sent += int(r)
			l.txStats.frames.Add(uint64(r))
		case unix.EINTR:
		case unix.EAGAIN, unix.ENOBUFS:
			l.txStats.dropped.Add(uint64(n - sent))
			return err
		default:
			// The message at sent failed; skip it.
			l.txStats.errors.Add(1)
			if err == nil {
				err = os.NewSyscallError("sendmmsg", e)
			}
			sent++
		}
	}
	return err
}
