package rdmacm

import (
	"encoding/binary"
	"strconv"
)

// A MAD (management datagram, IBA Vol 1, 13.4) is 256 bytes: the 24-byte
// common header, then 232 bytes of class data. CM MADs travel on QP1 as
// UD SEND_ONLY packets with Q_Key 0x80010000 (wire.GSIQKey):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    TransactionID (64 bits)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  CM message (232 bytes) ...                   |
const (
	MADLen       = 256 // every MAD, header included
	HeaderLen    = 24  // the common MAD header
	DataLen      = MADLen - HeaderLen
	BaseVersion  = 1    // IBA base version
	ClassCM      = 0x07 // management class of communication management
	ClassVersion = 2    // CM class version (Linux IB_CM_CLASS_VERSION)
	MethodSend   = 0x03 // the CM sends every message with method SEND
)

// Header is the common MAD header. Decode checks BaseVersion, MgmtClass,
// ClassVersion and Method against the constants above; Encode writes the
// fields as given after the same checks (CMHeader fills them in).
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8 // including the response bit 0x80
	Status        uint16
	ClassSpecific uint16
	// TID is the transaction ID. Linux puts its MAD agent's high TID in the
	// upper 32 bits and the sender's local communication ID, as it holds it
	// in memory, in the lower (the rxe captures: 0x000000025eb2ef82 for
	// comm ID 0x82efb25e); every message of one exchange carries the TID of
	// the REQ that started it.
	TID     uint64
	AttrID  AttrID
	Resv    uint16 // reserved; kept as found
	AttrMod uint32 // carries the ECE options in REQ and REP
}

// CMHeader returns the header of a CM message with transaction ID tid: base
// version 1, class CM, class version 2, method SEND.
func CMHeader(tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: ClassVersion, Method: MethodSend, TID: tid}
}

// AttrID is the attribute ID of a CM MAD: which message it carries.
type AttrID uint16

// The CM attributes (IBA Vol 1, 16.7.3, table 214 in 1.4; Linux cm_msgs.h).
const (
	AttrClassPortInfo AttrID = 0x0001 // not a CM message; Get/GetResp only
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRReq       AttrID = 0x0017
	AttrSIDRRep       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

// attrNames are the message names of AttrREQ (0x10) to AttrAPR (0x1A), in
// attribute ID order.
var attrNames = [...]string{"REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR"}

// String returns the message name ("REQ", "SIDR_REP") or "Attr(0x…)".
func (a AttrID) String() string {
	if a >= AttrREQ && a <= AttrAPR {
		return attrNames[a-AttrREQ]
	}
	if a == AttrClassPortInfo {
		return "ClassPortInfo"
	}
	return "Attr(0x" + strconv.FormatUint(uint64(a), 16) + ")"
}

// A Message is one CM message: *REQ, *MRA, *REJ, *REP, *RTU, *DREQ, *DREP,
// *LAP, *APR, *SIDRReq or *SIDRRep. Its fields are the message's fields
// after the MAD header; reserved bits are not kept (decode ignores them,
// encode writes zeros), as Linux neither checks nor sets them.
type Message interface {
	// AttrID is the attribute ID of the message type.
	AttrID() AttrID
	// String is a one-line summary: "REQ comm_id=0x82efb25e service_id=…".
	String() string
	decode(d *[DataLen]byte) error
	encode(d *[DataLen]byte) error
}

// NewMessage returns a zero message of the type attr names, or nil.
func NewMessage(attr AttrID) Message {
	switch attr {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRReq:
		return new(SIDRReq)
	case AttrSIDRRep:
		return new(SIDRRep)
	case AttrLAP:
		return new(LAP)
	case AttrAPR:
		return new(APR)
	}
	return nil
}

// ParseHeader decodes and checks the header of mad, which must be exactly
// MADLen bytes: base version 1, class CM, class version 2, method SEND, an
// attribute ID of a CM message. Errors: ErrLength, ErrNotCM, ErrVersion,
// ErrMethod, ErrUnknownAttr (the header is filled in for all but ErrLength).
func ParseHeader(mad []byte) (Header, error) {
	var h Header
	if len(mad) != MADLen {
		return h, errMADLength
	}
	h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method = mad[0], mad[1], mad[2], mad[3]
	h.Status = binary.BigEndian.Uint16(mad[4:])
	h.ClassSpecific = binary.BigEndian.Uint16(mad[6:])
	h.TID = binary.BigEndian.Uint64(mad[8:])
	h.AttrID = AttrID(binary.BigEndian.Uint16(mad[16:]))
	h.Resv = binary.BigEndian.Uint16(mad[18:])
	h.AttrMod = binary.BigEndian.Uint32(mad[20:])
	if err := h.check(); err != nil {
		return h, err
	}
	if h.AttrID < AttrREQ || h.AttrID > AttrAPR {
		return h, errAttr
	}
	return h, nil
}

// check applies the rules Linux's MAD layer and CM agent apply before a MAD
// reaches the CM: the class (else another agent's), the versions (else no
// agent), the method (the CM agent registers SEND only).
func (h *Header) check() error {
	switch {
	case h.BaseVersion != BaseVersion:
		return errBaseVersion
	case h.MgmtClass != ClassCM:
		return errClass
	case h.ClassVersion != ClassVersion:
		return errClassVersion
	case h.Method != MethodSend:
		return errMethod
	}
	return nil
}

// DecodeInto decodes mad into m, whose type must be the one the attribute ID
// names (else ErrUnknownAttr). It allocates nothing: a QP1 receiver keeps one
// message of each type and picks by ParseHeader's AttrID. Errors: those of
// ParseHeader, and ErrBadField for a length field beyond its area.
func DecodeInto(mad []byte, m Message) (Header, error) {
	h, err := ParseHeader(mad)
	if err != nil {
		return h, err
	}
	if m == nil || m.AttrID() != h.AttrID {
		return h, errAttrMismatch
	}
	return h, m.decode((*[DataLen]byte)(mad[HeaderLen:]))
}

// Decode decodes mad into a new message of the type its attribute ID names.
// Errors as DecodeInto; the message is nil unless err is nil.
func Decode(mad []byte) (Header, Message, error) {
	h, err := ParseHeader(mad)
	if err != nil {
		return h, nil, err
	}
	m := NewMessage(h.AttrID)
	if err := m.decode((*[DataLen]byte)(mad[HeaderLen:])); err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// Encode writes h and m as one MAD into the first MADLen bytes of buf and
// returns MADLen. h.AttrID must be 0 (Encode writes m's) or m's. Errors:
// ErrLength (buf too short), ErrBadField (a header that ParseHeader would
// refuse, or a field of m wider than its bits, named in the message),
// ErrUnknownAttr (no message, or h.AttrID names another).
func Encode(buf []byte, h Header, m Message) (int, error) {
	if len(buf) < MADLen {
		return 0, errEncShort
	}
	if m == nil {
		return 0, errEncNil
	}
	if h.check() != nil {
		return 0, errEncHeader
	}
	if h.AttrID != 0 && h.AttrID != m.AttrID() {
		return 0, errEncAttr
	}
	d := (*[DataLen]byte)(buf[HeaderLen:MADLen])
	*d = [DataLen]byte{}
	if err := m.encode(d); err != nil {
		return 0, err
	}
	buf[0], buf[1], buf[2], buf[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(buf[4:], h.Status)
	binary.BigEndian.PutUint16(buf[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(buf[8:], h.TID)
	binary.BigEndian.PutUint16(buf[16:], uint16(m.AttrID()))
	binary.BigEndian.PutUint16(buf[18:], h.Resv)
	binary.BigEndian.PutUint32(buf[20:], h.AttrMod)
	return MADLen, nil
}
