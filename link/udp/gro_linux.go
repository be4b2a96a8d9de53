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
// Messages land in 64 KiB buffers; Receive copies each segment into its own
// frame slot, behind room for the headers it rebuilds, and keeps what it has
// not returned for the next call.

// groSlot is the size of one coalesced message's buffer.
const groSlot = 1 << 16

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
			slot := l.rxSlots[k]
			copy(slot[headroom:], l.groBuf[i][p.off:p.off+seg])
			if f, ok := l.rebuild(i, slot, seg, uint16(p.off/max(p.seg, 1))); ok {
				frames[k] = f
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
