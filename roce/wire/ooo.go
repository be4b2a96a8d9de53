package wire

import "strconv"

// The OOO part of the wire (docs/ooo-wire.md): the context and notify
// types the OOO headers share, the headers' place after the RETH, and the
// rules Decode and Encode check for the OOO opcodes beyond lengths.

// Ctx names an OOO receive context: a 24-bit id and an 8-bit key (the
// generation a recovery bumps, so packets from before it no longer match).
type Ctx uint32

// MakeCtx returns the context with id (24 bits; higher bits are dropped)
// and key.
func MakeCtx(id uint32, key uint8) Ctx { return Ctx(id<<8 | uint32(key)) }

// ID returns the 24-bit context id.
func (c Ctx) ID() uint32 { return uint32(c) >> 8 }

// Key returns the 8-bit key.
func (c Ctx) Key() uint8 { return uint8(c) }

// String returns "0x000101/k3": the id in hex, the key in decimal.
func (c Ctx) String() string {
	var b [16]byte
	return string(c.AppendText(b[:0]))
}

// AppendText appends the String form of c to b.
func (c Ctx) AppendText(b []byte) []byte {
	const digits = "0123456789abcdef"
	id := c.ID()
	b = append(b, '0', 'x')
	for s := 20; s >= 0; s -= 4 {
		b = append(b, digits[id>>s&0xF])
	}
	b = append(b, '/', 'k')
	return strconv.AppendUint(b, uint64(c.Key()), 10)
}

// Notify is byte 16 of the XRH: who gets a completion when the operation
// is placed whole (bits 1..0), and a completion to self for conditional
// operations (bit 3). The other bits are reserved.
type Notify uint8

// Notify values.
const (
	NotifyNone      Notify = 0    // no completion at all
	NotifyInitiator Notify = 1    // an OOO_COMPLETION packet to the initiator (or the controller)
	NotifyTarget    Notify = 2    // a completion to the target's user
	NotifyBoth      Notify = 3    // both
	NotifyToSelf    Notify = 0x08 // a completion to self, for conditional operations
	notifyWho       Notify = 0x03
)

// Who returns the low two bits: NotifyNone, NotifyInitiator, NotifyTarget or
// NotifyBoth.
func (n Notify) Who() Notify { return n & notifyWho }

// ToSelf reports bit 3.
func (n Notify) ToSelf() bool { return n&NotifyToSelf != 0 }

var notifyNames = [...]string{"none", "initiator", "target", "both"}

// String returns "none", "initiator", "target" or "both", then "+self" for
// bit 3 and "+0x.." for reserved bits.
func (n Notify) String() string {
	s := notifyNames[n.Who()]
	if n.ToSelf() {
		s += "+self"
	}
	if r := n &^ (notifyWho | NotifyToSelf); r != 0 {
		s += "+0x" + strconv.FormatUint(uint64(r), 16)
	}
	return s
}

// decodeOOO decodes the OOO headers h from b (the bytes after the RETH, if
// any), which the caller has checked are long enough.
func (p *Packet) decodeOOO(h Headers, b []byte) {
	if h&HasXRH != 0 {
		p.XRH.decode(b)
		b = b[XRHLen:]
	}
	if h&HasXRR != 0 {
		p.XRR.decode(b)
		b = b[XRRLen:]
	}
	if h&HasXCS != 0 {
		p.XCS.decode(b)
		b = b[XCSLen:]
	}
	if h&HasXTPTarget != 0 {
		p.XTPTarget.decode(b)
		b = b[XTPLen:]
	}
	if h&HasXTPController != 0 {
		p.XTPController.decode(b)
	}
}

func (p *Packet) encodeOOO(h Headers, b []byte) {
	if h&HasXRH != 0 {
		p.XRH.encode(b)
		b = b[XRHLen:]
	}
	if h&HasXRR != 0 {
		p.XRR.encode(b)
		b = b[XRRLen:]
	}
	if h&HasXCS != 0 {
		p.XCS.encode(b)
		b = b[XCSLen:]
	}
	if h&HasXTPTarget != 0 {
		p.XTPTarget.encode(b)
		b = b[XTPLen:]
	}
	if h&HasXTPController != 0 {
		p.XTPController.encode(b)
	}
}

// oooRule checks what an OOO packet's headers say against each other and
// against the payload length n, and returns one of the ooo* codes:
//   - data packets (OOO_WRITE, OOO_3P_WRITE, OOO_FIFO_SEND): RETH.DMALen
//     (when there is a RETH) is n; the segment
//     is a path MTU; the packet lies inside the operation (offset
//     PSN × segment, plus n, at most Total) and is a whole segment unless it
//     ends the operation;
//   - READ requests: RETH.DMALen (when there is a RETH) equals XRH.Total,
//     and the segment of the
//     response is a path MTU.
func (p *Packet) oooRule(info *OpInfo, n int) int {
	switch info.Kind {
	case KindWrite, KindSend:
		if info.Headers&HasRETH != 0 && p.RETH.DMALen != uint32(n) {
			return oooLen
		}
		seg := uint64(p.XRH.Seg.Bytes())
		if seg == 0 {
			return oooSeg
		}
		end := p.XRH.Offset(p.BTH.PSN) + uint64(n)
		if uint64(n) > seg || end > uint64(p.XRH.Total) || uint64(n) != seg && end != uint64(p.XRH.Total) {
			return oooPlace
		}
	case KindReadRequest:
		if info.Headers&HasRETH != 0 && p.RETH.DMALen != p.XRH.Total {
			return oooTotal
		}
		if !p.XRH.Seg.Valid() {
			return oooSeg
		}
	}
	return oooOK
}

const (
	oooOK = iota
	oooLen
	oooSeg
	oooPlace
	oooTotal
)

func oooErr(rule int, encode bool) error {
	if rule == oooOK {
		return nil
	}
	if encode {
		return [...]error{oooLen: errEncOOOLen, oooSeg: errEncOOOSeg, oooPlace: errEncOOOPlace, oooTotal: errEncOOOTotal}[rule]
	}
	return [...]error{oooLen: errOOOLen, oooSeg: errOOOSeg, oooPlace: errOOOPlace, oooTotal: errOOOTotal}[rule]
}
