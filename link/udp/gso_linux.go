package udp

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/roce/wire"
)

// Segmentation offload on transmit (UDP_SEGMENT).
//
// Send groups consecutive frames that share destination, source, TOS and
// payload size (the last of a group may be shorter, as UDP_SEGMENT allows)
// into one message: one iovec per frame, the size in a UDP_SEGMENT control
// message. The kernel builds one large datagram and cuts it into segments of
// that size, each with its own UDP and IP header, in software before the
// device or in the device; the receiver sees the frames Send was given.
// Frames of different TOS never share a message, since the kernel writes one
// TOS for all segments.
//
// The ICRC covers the IPv4 Identification, which the kernel writes per
// segment. For this socket (never connected, IP_PMTUDISC_DO so DF set and
// not ignored) ip_select_ident_segs gives the message's IP header ID 0, and
// inet_gso_segment, for UDP_L4 segmentation (no fixed-ID flag: that is
// TCP's), numbers the segments from there: segment k leaves with ID k
// (modulo 2^16; a device segmenting in hardware follows the same rule). So
// before handing a group of n ≥ 2 frames over, Send moves frame k's
// Identification to k and its ICRC with it (wire.MoveIPv4ID: the CRC is
// affine, so the change alone moves it, with no pass over the frame, and a
// frame sent with a wrong ICRC keeps its error). A single frame
// leaves as a plain datagram with ID 0, as without GSO. IPv6 has no ID.
//
// Where the kernel refuses a UDP_SEGMENT message — EIO before Linux 6.11 on
// a device without transmit checksum offload (later kernels checksum the
// segments in software) or through IPsec; EINVAL without UDP checksums or
// on kernels before 4.18 — GSO is turned off for the link (whatever device
// the refused message was for), said once at info level, and that message's
// frames and all later ones go one datagram each.

const (
	// maxSegs is the most frames per message (the kernel's
	// UDP_MAX_SEGMENTS is 64, 128 since Linux 6.10).
	maxSegs = 64
	// maxGSOBytes is the most payload bytes per message: an IPv4 datagram
	// of at most 65535 bytes.
	maxGSOBytes = 65535 - 20 - 8
	// gsoFramesPerBatch is how many frames one sendmmsg carries, in units
	// of Config.Batch.
	gsoFramesPerBatch = 4
)

// A group is a run of frames that leaves as one message.
type group struct {
	first, n int // frames[first : first+n]
	size     int // payload bytes of each frame but a shorter last one
	short    bool
	tos      byte
	v4       bool
	src, dst [16]byte
}

// gsoState is the transmit side of GSO: messages (one per group) and the
// frames of up to gsoFramesPerBatch×Batch frames.
type gsoState struct {
	hdrs   []mmsghdr
	names  []unix.RawSockaddrInet6
	ctl    []byte
	groups []group
	iov    []unix.Iovec // one per frame
	frames [][]byte
	ng, nf int // groups and frames prepared
}

func (s *gsoState) init(batch int, pktinfo bool, nameLen uint32) {
	s.hdrs = make([]mmsghdr, batch)
	s.names = make([]unix.RawSockaddrInet6, batch)
	s.ctl = make([]byte, batch*cmsgRoom)
	s.groups = make([]group, batch)
	s.iov = make([]unix.Iovec, batch*gsoFramesPerBatch)
	s.frames = make([][]byte, batch*gsoFramesPerBatch)
	for i := range batch {
		h := &s.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		h.Namelen = nameLen
		if pktinfo {
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&s.ctl[i*cmsgRoom]))
			cm.Level = unix.IPPROTO_IPV6
			cm.Type = unix.IPV6_PKTINFO
			cm.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
		}
	}
}

// joins reports whether a frame of ft with size payload bytes may follow
// group g. A shorter frame ends a group of two or more, but does not join
// a single frame: a stream of long WRITEs then goes as [FIRST] and [MIDDLE
// … LAST] (FIRST is RETH's 16 bytes longer) rather than [FIRST, MIDDLE] and
// [MIDDLE … LAST], as many messages, and the receiver, whose frame slots
// are cut to the runs' segment size (gro_linux.go), copies one frame of
// each WRITE instead of two.
func (g *group) joins(ft *frameInfo, size int) bool {
	return !g.short && g.n < maxSegs && size > 0 && (size == g.size || size < g.size && g.n > 1) &&
		g.n*g.size+size <= maxGSOBytes && ft.v4 == g.v4 && ft.tos == g.tos &&
		ft.dst == g.dst && ft.src == g.src
}

// sendGSO is Send with GSO on.
func (l *Link) sendGSO(frames [][]byte) error {
	s := &l.gsoTx
	var err error
	for j, f := range frames {
		if !l.pool.Put(f) {
			l.txStats.invalid.Add(1)
			err = errForeign
			continue
		}
		ft, e := parseFrame(f)
		if e == nil && !ft.v4 && !l.v6 {
			e = errFamily
		}
		if e != nil {
			l.txStats.invalid.Add(1)
			err = e
			continue
		}
		size := len(ft.payload)
		if s.ng > 0 && s.nf < len(s.frames) && s.groups[s.ng-1].joins(&ft, size) {
			g := &s.groups[s.ng-1]
			g.short = size < g.size
			g.n++
		} else {
			if s.ng == len(s.groups) || s.nf == len(s.frames) {
				if e := l.flushGSO(); e != nil && err == nil {
					err = e
				}
				if !l.gso.Load() {
					// The kernel refused: this frame and the rest plain.
					e := l.sendPlain(frames[j:j+1], false)
					return firstErr(err, firstErr(e, l.sendPlain(frames[j+1:], true)))
				}
			}
			s.groups[s.ng] = group{first: s.nf, n: 1, size: size, tos: ft.tos, v4: ft.v4, src: ft.src, dst: ft.dst}
			l.address(&s.names[s.ng], s.ctl[s.ng*cmsgRoom:], &ft)
			s.ng++
		}
		s.frames[s.nf] = f
		if size == 0 {
			s.iov[s.nf].Base = nil
		} else {
			s.iov[s.nf].Base = &ft.payload[0]
		}
		s.iov[s.nf].SetLen(size)
		s.nf++
	}
	if e := l.flushGSO(); e != nil && err == nil {
		err = e
	}
	return err
}

// flushGSO sends the prepared groups, one message each.
func (l *Link) flushGSO() error {
	s := &l.gsoTx
	ng := s.ng
	defer func() { s.ng, s.nf = 0, 0 }()
	for i := range ng {
		g := &s.groups[i]
		h := &s.hdrs[i].Hdr
		h.Iov = &s.iov[g.first]
		h.SetIovlen(g.n)
		ctl := s.ctl[i*cmsgRoom : (i+1)*cmsgRoom]
		off := 0
		if l.pktinfo {
			off = unix.CmsgSpace(unix.SizeofInet6Pktinfo)
		}
		if g.n > 1 {
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[off]))
			cm.Level = unix.SOL_UDP
			cm.Type = unix.UDP_SEGMENT
			cm.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&ctl[off+unix.CmsgLen(0)])) = uint16(g.size)
			off += unix.CmsgSpace(2)
			if g.v4 {
				for k, f := range s.frames[g.first : g.first+g.n] {
					wire.MoveIPv4ID(f, uint16(k))
				}
			}
		}
		off = putTOS(ctl, off, g.tos, g.v4)
		h.Control = nil
		if off > 0 {
			h.Control = &ctl[0]
		}
		h.SetControllen(off)
	}
	var err error
	for sent := 0; sent < ng; {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(l.fd), uintptr(unsafe.Pointer(&s.hdrs[sent])),
			uintptr(ng-sent), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			for _, g := range s.groups[sent : sent+int(r)] {
				l.txStats.frames.Add(uint64(g.n))
				if g.n > 1 {
					l.txStats.gso.Add(1)
				}
			}
			sent += int(r)
		case unix.EINTR:
		case unix.EAGAIN, unix.ENOBUFS:
			l.txStats.dropped.Add(uint64(s.nf - s.groups[sent].first))
			return err
		case unix.EIO, unix.EINVAL:
			if s.groups[sent].n > 1 {
				return firstErr(err, l.gsoRefused(e, sent))
			}
			fallthrough
		default:
			// The message at sent failed; skip it.
			l.txStats.errors.Add(uint64(s.groups[sent].n))
			if err == nil {
				err = os.NewSyscallError("sendmmsg", e)
			}
			sent++
		}
	}
	return err
}

// gsoRefused turns GSO off after the kernel refused the UDP_SEGMENT message
// of group gi with e, says so once, and sends that group's frames and the
// later ones one datagram each, their IPv4 Identification back to 0 (what
// the kernel writes into a plain datagram from this socket).
func (l *Link) gsoRefused(e unix.Errno, gi int) error {
	s := &l.gsoTx
	if l.gso.Swap(false) {
		l.log.Info("udp: GSO off, one datagram per frame: the kernel refused UDP_SEGMENT", "err", os.NewSyscallError("sendmmsg", e))
	}
	for _, g := range s.groups[gi:s.ng] {
		if g.n > 1 && g.v4 {
			for _, f := range s.frames[g.first : g.first+g.n] {
				wire.MoveIPv4ID(f, 0)
			}
		}
	}
	return l.sendPlain(s.frames[s.groups[gi].first:s.nf], false)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
