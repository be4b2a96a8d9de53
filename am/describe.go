package am

import (
	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce/wire"
)

// DescribePacket is Describe for a decoded RoCE packet: an RC SEND (only or
// first packet of a message) whose payload starts with Magic. The package
// registers it with capture (name "am") so that a program importing am
// (xdproce dump) prints AM_WRITE, AM_WRITE_RTS, AM_READ, AM_READ_REPLY,
// AM_DONE and AM_NAK with their fields.
func DescribePacket(p *wire.Packet) (string, bool) {
	switch p.BTH.Opcode {
	case wire.RCSendOnly, wire.RCSendFirst:
		return Describe(p.Payload)
	}
	return "", false
}

func init() { capture.RegisterPayloadDescriber("am", DescribePacket) }
