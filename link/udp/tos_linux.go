package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// TOS and ECN.
//
// The frames' IPv4 TOS / IPv6 traffic class (DSCP and the ECN bits: a
// queue pair with DCQCN sends ECT(0), docs/cc.md) leave with each message
// as an IP_TOS / IPV6_TCLASS control message, written only when not 0 (the
// socket's default), so rxe sessions send exactly what they did. On
// receive the socket asks for the same (IP_RECVTOS, IPV6_RECVTCLASS) and
// rebuild writes it into the frame, so the engine sees a switch's CE mark.
// Kernel GRO merges only datagrams with equal TOS (inet_gro_receive and
// ipv6_gro_receive compare it), so the TOS of a coalesced message is each
// segment's; Send groups frames for UDP_SEGMENT by TOS for the same reason.

// putTOS writes a control message carrying tos for a datagram of the given
// family at ctl[off:] and returns the offset after it; tos 0 writes
// nothing.
func putTOS(ctl []byte, off int, tos byte, v4 bool) int {
	if tos == 0 {
		return off
	}
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[off]))
	cm.Level, cm.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	if v4 {
		cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_TOS
	}
	cm.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&ctl[off+unix.CmsgLen(0)])) = int32(tos)
	return off + unix.CmsgSpace(4)
}

// receivedTOS returns the TOS (traffic class) in message i's control data,
// or 0.
func (l *Link) receivedTOS(i int) byte {
	ctl := l.control(i)
	for off := 0; ; {
		cm, data, next := nextCmsg(ctl, off)
		if cm == nil {
			return 0
		}
		switch {
		case cm.Level == unix.IPPROTO_IP && cm.Type == unix.IP_TOS && len(data) >= 1:
			return data[0]
		case cm.Level == unix.IPPROTO_IPV6 && cm.Type == unix.IPV6_TCLASS && len(data) >= 4:
			return byte(*(*int32)(unsafe.Pointer(&data[0])))
		}
		off = next
	}
}
