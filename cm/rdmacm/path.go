package rdmacm

// PathLen is the size of a path in a REQ (IBA Vol 1, 12.6.5, table 106:
// primary path at REQ byte 52, alternate at 96):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Local Port LID        |        Remote Port LID        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Local Port GID (128 bits)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote Port GID (128 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Flow Label (20 bits)           |  Resv     |PacketRate |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Traffic Class |   Hop Limit   |  SL   |S|Resv | ACK TO  |Resv |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// (S: subnet local; ACK TO: local ACK timeout, 5 bits.) The last bits of the
// alternate path's final byte hold REQ's SAP Supported flag.
const PathLen = 44

// Path is a path record as a REQ carries it. On RoCE, Linux puts the
// IPv4-mapped (::ffff:a.b.c.d) or IPv6 addresses in the GIDs, 0xFFFF in both
// LIDs when the hop limit is above 1, the flow label it derives from the
// CM ports (see ROCEV2.md) and the IP TTL in HopLimit.
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits, IBA rate enum
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits: 4.096 µs · 2^n
}

func (p *Path) decode(b []byte) {
	_ = b[PathLen-1]
	p.LocalLID, p.RemoteLID = be16(b), be16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = be32(b[36:]) >> 12
	p.PacketRate = field(b[39], 2, 6)
	p.TrafficClass, p.HopLimit = b[40], b[41]
	p.SL = field(b[42], 0, 4)
	p.SubnetLocal = flagBit(b[42], 4)
	p.LocalACKTimeout = field(b[43], 0, 5)
}

// pathFieldNames name a path's range-checked fields in errors, primary and
// alternate (constants, so that a passing check allocates nothing).
var pathFieldNames = [2][4]string{
	{"primary flow label", "primary packet rate", "primary SL", "primary local ACK timeout"},
	{"alternate flow label", "alternate packet rate", "alternate SL", "alternate local ACK timeout"},
}

func (p *Path) check(c *rangeCheck, alternate bool) {
	n := &pathFieldNames[0]
	if alternate {
		n = &pathFieldNames[1]
	}
	c.max(n[0], uint64(p.FlowLabel), max20)
	c.max(n[1], uint64(p.PacketRate), max6)
	c.max(n[2], uint64(p.SL), max4)
	c.max(n[3], uint64(p.LocalACKTimeout), max5)
}

// encode writes p into zeroed b; check has passed.
func (p *Path) encode(b []byte) {
	_ = b[PathLen-1]
	put16(b, p.LocalLID)
	put16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	put32(b[36:], p.FlowLabel<<12)
	setField(&b[39], 2, 6, p.PacketRate)
	b[40], b[41] = p.TrafficClass, p.HopLimit
	setField(&b[42], 0, 4, p.SL)
	setFlag(&b[42], 4, p.SubnetLocal)
	setField(&b[43], 0, 5, p.LocalACKTimeout)
}
