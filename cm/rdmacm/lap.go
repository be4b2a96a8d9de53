package rdmacm

import "strconv"

// Private data sizes of LAP and APR (IBA Vol 1, 12.8.1 and 12.8.2), and the
// size of APR's additional information.
const (
	LAPPrivateDataLen = 168
	APRPrivateDataLen = 148
	APRInfoLen        = 72
)

// LAP, load alternate path (IBA Vol 1, 12.8.1, table 115): path migration,
// which RoCE does not use; xdproce refuses it (an APR or no answer), and
// decodes it so it can. Byte offsets from the start of the message, bit 0
// the most significant:
//
//	 0 LocalCommID   4 RemoteCommID   12 RemoteQPN (24) | 15 RemoteCMResponseTimeout (5)
//	20 AltLocalLID   22 AltRemoteLID  24 AltLocalGID     40 AltRemoteGID
//	56 AltFlowLabel (20) | 59 AltTrafficClass   60 AltHopLimit   61 AltPacketRate (bits 2..7)
//	62 AltSL (4), AltSubnetLocal (1)   63 AltLocalACKTimeout (5)   64 private data (168)
//
// The alternate path is laid out differently from a REQ's (traffic class
// before hop limit before packet rate), so it is read field by field into a
// Path.
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	Alternate               Path
	PrivateData             [LAPPrivateDataLen]byte
}

// AttrID returns AttrLAP.
func (*LAP) AttrID() AttrID { return AttrLAP }

func (m *LAP) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID = be32(d[0:]), be32(d[4:])
	m.RemoteQPN, m.RemoteCMResponseTimeout = u24(d[12:]), field(d[15], 0, 5)
	p := &m.Alternate
	p.LocalLID, p.RemoteLID = be16(d[20:]), be16(d[22:])
	copy(p.LocalGID[:], d[24:40])
	copy(p.RemoteGID[:], d[40:56])
	p.FlowLabel = be32(d[56:]) >> 12
	p.TrafficClass, p.HopLimit, p.PacketRate = d[59], d[60], field(d[61], 2, 6)
	p.SL, p.SubnetLocal, p.LocalACKTimeout = field(d[62], 0, 4), flagBit(d[62], 4), field(d[63], 0, 5)
	copy(m.PrivateData[:], d[64:])
	return nil
}

func (m *LAP) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("remote QPN", uint64(m.RemoteQPN), max24)
	c.max("remote CM response timeout", uint64(m.RemoteCMResponseTimeout), max5)
	m.Alternate.check(&c, true)
	if err := c.err("encode lap"); err != nil {
		return err
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	put24(d[12:], m.RemoteQPN)
	setField(&d[15], 0, 5, m.RemoteCMResponseTimeout)
	p := &m.Alternate
	put16(d[20:], p.LocalLID)
	put16(d[22:], p.RemoteLID)
	copy(d[24:40], p.LocalGID[:])
	copy(d[40:56], p.RemoteGID[:])
	put32(d[56:], p.FlowLabel<<12)
	d[59], d[60] = p.TrafficClass, p.HopLimit
	setField(&d[61], 2, 6, p.PacketRate)
	setField(&d[62], 0, 4, p.SL)
	setFlag(&d[62], 4, p.SubnetLocal)
	setField(&d[63], 0, 5, p.LocalACKTimeout)
	copy(d[64:], m.PrivateData[:])
	return nil
}

// String summarises the LAP: "LAP comm_id=… remote_comm_id=… remote_qpn=…".
func (m *LAP) String() string {
	return "LAP comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" remote_qpn=" + hex(m.RemoteQPN)
}

// APStatus is APR's status (IBA Vol 1, 12.8.2, table 117; Linux enum
// ib_cm_apr_status).
type APStatus uint8

// APR statuses.
const (
	APRSuccess           APStatus = 0
	APRInvalidCommID     APStatus = 1
	APRUnsupported       APStatus = 2 // path migration not supported: xdproce's answer
	APRReject            APStatus = 3
	APRRedirect          APStatus = 4
	APRIsCurrent         APStatus = 5
	APRInvalidQPN        APStatus = 6
	APRInvalidLID        APStatus = 7
	APRInvalidGID        APStatus = 8
	APRInvalidFlowLabel  APStatus = 9
	APRInvalidTClass     APStatus = 10
	APRInvalidHopLimit   APStatus = 11
	APRInvalidPacketRate APStatus = 12
	APRInvalidSL         APStatus = 13
)

// APR, alternate path response (IBA Vol 1, 12.8.2, table 116). Bytes 0
// LocalCommID, 4 RemoteCommID, 8 AdditionalInfoLength, 9 APStatus, 12
// additional information (72), 84 private data (148).
type APR struct {
	LocalCommID  uint32
	RemoteCommID uint32
	// InfoLength is how many bytes of Info count (at most APRInfoLen;
	// decode refuses more).
	InfoLength  uint8
	Status      APStatus
	Info        [APRInfoLen]byte
	PrivateData [APRPrivateDataLen]byte
}

// AttrID returns AttrAPR.
func (*APR) AttrID() AttrID { return AttrAPR }

func (m *APR) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID = be32(d[0:]), be32(d[4:])
	m.InfoLength, m.Status = d[8], APStatus(d[9])
	copy(m.Info[:], d[12:84])
	copy(m.PrivateData[:], d[84:])
	if m.InfoLength > APRInfoLen {
		return errAPRInfoLen
	}
	return nil
}

func (m *APR) encode(d *[DataLen]byte) error {
	if m.InfoLength > APRInfoLen {
		return &Error{Op: "encode apr", Msg: "additional info length out of range", Err: ErrBadField}
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	d[8], d[9] = m.InfoLength, uint8(m.Status)
	copy(d[12:84], m.Info[:])
	copy(d[84:], m.PrivateData[:])
	return nil
}

// String summarises the APR: "APR comm_id=… remote_comm_id=… status=2".
func (m *APR) String() string {
	return "APR comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" status=" + strconv.Itoa(int(m.Status))
}
