package rdmacm

import "strconv"

// Private data sizes of MRA and RTU (IBA Vol 1, 12.6.6 and 12.6.9).
const (
	MRAPrivateDataLen = 222
	RTUPrivateDataLen = 224
)

// MRA, message receipt acknowledgement (IBA Vol 1, 12.6.6, table 107): "I
// got your message, the answer takes longer; wait ServiceTimeout more".
// Byte offsets from the start of the message, bit 0 the most significant:
//
//	0 LocalCommID   4 RemoteCommID   8 MessageMRAed (2)   9 ServiceTimeout (5)
//	10 private data (222)
type MRA struct {
	LocalCommID  uint32
	RemoteCommID uint32
	MessageMRAed MsgKind // 2 bits: REQ, REP or LAP (MsgOther)
	// ServiceTimeout (5 bits, 4.096 µs · 2^n, see Timeout) is added to the
	// receiver's wait for the real answer.
	ServiceTimeout uint8
	PrivateData    [MRAPrivateDataLen]byte
}

// AttrID returns AttrMRA.
func (*MRA) AttrID() AttrID { return AttrMRA }

func (m *MRA) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID = be32(d[0:]), be32(d[4:])
	m.MessageMRAed, m.ServiceTimeout = MsgKind(field(d[8], 0, 2)), field(d[9], 0, 5)
	copy(m.PrivateData[:], d[10:])
	return nil
}

func (m *MRA) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("message MRAed", uint64(m.MessageMRAed), max2)
	c.max("service timeout", uint64(m.ServiceTimeout), max5)
	if err := c.err("encode mra"); err != nil {
		return err
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	setField(&d[8], 0, 2, uint8(m.MessageMRAed))
	setField(&d[9], 0, 5, m.ServiceTimeout)
	copy(d[10:], m.PrivateData[:])
	return nil
}

// String summarises the MRA: "MRA comm_id=… remote_comm_id=… mraed=REQ service_timeout=24".
func (m *MRA) String() string {
	return "MRA comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" mraed=" + m.MessageMRAed.String() + " service_timeout=" + strconv.Itoa(int(m.ServiceTimeout))
}

// RTU, ready to use (IBA Vol 1, 12.6.9, table 111): the active side's last
// message of the establishment. Bytes 0 LocalCommID, 4 RemoteCommID, 8
// private data (224).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID returns AttrRTU.
func (*RTU) AttrID() AttrID { return AttrRTU }

func (m *RTU) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID = be32(d[0:]), be32(d[4:])
	copy(m.PrivateData[:], d[8:])
	return nil
}

func (m *RTU) encode(d *[DataLen]byte) error {
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	copy(d[8:], m.PrivateData[:])
	return nil
}

// String summarises the RTU: "RTU comm_id=… remote_comm_id=…".
func (m *RTU) String() string {
	return "RTU comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID)
}
