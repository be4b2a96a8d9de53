package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Receive offload (UDP_GRO).
//
// With UDP_GRO set, the kernel hands over, as one message, datagrams of one
// flow that it coalesced (GRO on the device) or that were never segmented
// (veth and loopback pass a UDP_SEGMENT skb through whole), with their
// segment size in a UDP_GRO control message. Every segment but a shorter
// last one has that size and is one datagram as sent: one RoCEv2 packet.
// Coalesced datagrams share their headers: the kernel's GRO merges only
// packets whose IP headers agree but for length, checksum and an
// Identification counting up (inet_gro_receive compares TOS, TTL and DF,
// udp_gro_receive the ports), so datagrams of different TOS (ECN) come in
// different messages.
//
// Each message is received into a 64 KiB region, scattered (one iovec
// each) over frame slots of the segment size of the last coalesced message
// of three segments or more, each behind room for the headers Receive
// rebuilds. In a stream of equal segments each lands in a slot of its own
// and is returned where it is, with no copy (the receiver's largest copy
// before this: ~12 % of a `bench write` server's CPU at MTU 9000). A
// segment that does not start a slot or is longer than one (another size
// than predicted, or beyond the slots, in the region's tail) is gathered
// into a frame slot, as every segment was before. Shorter messages do not
// set the size: a sender whose groups may end with a shorter frame, as
// UDP_SEGMENT and GRO allow, can send a stream of 64 KiB WRITEs at PMTU
// 4096 as [FIRST, MIDDLE] (RETH makes FIRST 16 bytes longer) and [MIDDLE …
// LAST], and the pairs would switch the layout every message: 55 % of the
// frames copied instead of 12.5 % (this package's sender sends FIRST alone,
// gso_linux.go: 6 %). What Receive has not returned waits for the next call.

// groSlot is the bytes one message can hold.
const groSlot = 1 << 16

// groIovs bounds the frame slots a message is scattered over; the region's
// tail, after them, takes what is left of groSlot.
const groIovs = 64

// groRegion is the size of one message's region: groSlot bytes and room for
// headers before each of at most groIovs slots and the tail.
const groRegion = groSlot + (groIovs+1)*headroom

// minPredict is the smallest segment size laid out as slots: smaller ones
// (ACKs) are no stream worth scattering.
const minPredict = 256

// pending is where Receive is in the messages of the last recvmmsg.
type pending struct {
	msgs, msg int // messages received, the one being split
	off, seg  int // its next segment's offset; the segment size
}

// receiveGRO is Receive with UDP_GRO on: it returns the pending segments
// and, when there are none, receives more.
func (l *Link) receiveGRO(frames [][]byte) (int, error) {
	p := &l.pend
	k := 0
	for k < len(frames) {
		if p.msg >= p.msgs {
			if k > 0 {
				break
			}
			l.layoutGRO(len(frames))
			r, err := l.recv(len(frames), groSlot)
			if err != nil || r == 0 {
				return 0, err
			}
			p.msgs, p.msg = r, 0
			l.startMsg()
			continue
		}
		i := p.msg
		total := int(l.rxHdrs[i].Len)
		seg := min(p.seg, total-p.off)
		if seg > l.rxMax {
			l.rxStats.truncated.Add(1)
		} else {
			slot := l.groSegment(i, p.off, seg)
			if slot == nil {
				slot = l.rxSlots[k]
				l.gather(i, slot[headroom:headroom+seg], p.off)
				l.rxStats.groCopied.Add(1)
			}
			if f, ok := l.rebuild(i, slot, seg, uint16(p.off/max(p.seg, 1))); ok {
				frames[k] = f
				l.rxChecked[k] = l.checked
				k++
			}
		}
		p.off += max(seg, 1)
		if p.off >= total {
			p.msg++
			l.startMsg()
		}
	}
	l.rxStats.frames.Add(uint64(k))
	return k, nil
}

// startMsg prepares to split message p.msg, skipping truncated ones.
func (l *Link) startMsg() {
	p := &l.pend
	for ; p.msg < p.msgs; p.msg++ {
		h := &l.rxHdrs[p.msg]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			l.rxStats.truncated.Add(1)
			continue
		}
		total := int(h.Len)
		p.off, p.seg = 0, total
		if s := l.groSize(p.msg); s > 0 && s < total {
			p.seg = s
			l.rxStats.coalesced.Add(1)
			if s >= minPredict && s <= l.rxMax && total > 2*s {
				l.groPredict = s // the next layout's slot size
			}
		}
		return
	}
}

// groSize returns the segment size in message i's UDP_GRO control message,
// or 0.
func (l *Link) groSize(i int) int {
	ctl := l.control(i)
	for off := 0; ; {
		cm, data, next := nextCmsg(ctl, off)
		if cm == nil {
			return 0
		}
		if cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && len(data) >= 4 {
			return int(*(*int32)(unsafe.Pointer(&data[0])))
		}
		off = next
	}
}

// layoutGRO scatters each of the first n messages' regions over slots of
// l.groPredict bytes (groIovs at most, each behind headroom bytes) and the
// region's tail, unless they are laid out so already.
func (l *Link) layoutGRO(n int) {
	s := l.groPredict
	if s == l.groLaidS && n <= l.groLaidN {
		return
	}
	k := min(groIovs, groSlot/s)
	tail := groSlot - k*s
	for i := range n {
		region := l.groBuf[i]
		iov := l.groIov[i*(groIovs+1) : (i+1)*(groIovs+1)]
		for j := range k {
			iov[j].Base = &region[j*(headroom+s)+headroom]
			iov[j].SetLen(s)
		}
		m := k
		if tail > 0 {
			iov[k].Base = &region[k*(headroom+s)+headroom]
			iov[k].SetLen(tail)
			m++
		}
		h := &l.rxHdrs[i].Hdr
		h.Iov = &iov[0]
		h.SetIovlen(m)
	}
	l.groLaidS, l.groLaidK, l.groLaidN = s, k, n
}

// groSegment returns the frame slot (headroom, then the segment) that the
// segment of message i at off, seg bytes long, landed in, or nil when it
// did not land at the start of one slot (gather it).
func (l *Link) groSegment(i, off, seg int) []byte {
	s, k := l.groLaidS, l.groLaidK
	if off%s != 0 || seg > s || off/s >= k {
		return nil
	}
	j := off / s
	return l.groBuf[i][j*(headroom+s) : (j+1)*(headroom+s) : (j+1)*(headroom+s)]
}

// gather copies message i's bytes from off into dst, across the slots and
// the tail they were scattered over.
func (l *Link) gather(i int, dst []byte, off int) {
	s, k := l.groLaidS, l.groLaidK
	region := l.groBuf[i]
	for len(dst) > 0 {
		var src []byte
		if j := off / s; j < k {
			src = region[j*(headroom+s)+headroom+off%s : (j+1)*(headroom+s)]
		} else {
			src = region[k*(headroom+s)+headroom+off-k*s : k*(headroom+s)+headroom+groSlot-k*s]
		}
		c := copy(dst, src)
		if c == 0 {
			return // beyond the region: cannot be, the kernel filled at most groSlot
		}
		dst, off = dst[c:], off+c
	}
}
