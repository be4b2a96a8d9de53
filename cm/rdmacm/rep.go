package rdmacm

// REP private data: 196 bytes at REP byte 36 (IBA Vol 1, 12.6.8).
const REPPrivateDataLen = 196

// REP, reply to request for communication (IBA Vol 1, 12.6.8, table 110),
// the passive side's acceptance. Byte offsets from the start of the
// message, bit 0 the most significant:
//
//	 0 LocalCommID     4 RemoteCommID     8 LocalQKey
//	12 LocalQPN (24) | 15 VendorID bits 23..16
//	16 LocalEECN (24) | 19 VendorID bits 15..8
//	20 StartingPSN (24) | 23 VendorID bits 7..0
//	24 ResponderResources   25 InitiatorDepth
//	26 TargetACKDelay (5), FailoverAccepted (2), E2E flow control (1)
//	27 RNRRetryCount (3), SRQ (1)
//	28 LocalCAGUID (64)    36 private data (196)
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	VendorID            uint32 // 24 bits, ECE, split over bytes 15, 19, 23
	LocalEECN           uint32 // 24 bits
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

// AttrID returns AttrREP.
func (*REP) AttrID() AttrID { return AttrREP }

func (m *REP) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID, m.LocalQKey = be32(d[0:]), be32(d[4:]), be32(d[8:])
	m.LocalQPN, m.LocalEECN, m.StartingPSN = u24(d[12:]), u24(d[16:]), u24(d[20:])
	m.VendorID = uint32(d[15])<<16 | uint32(d[19])<<8 | uint32(d[23])
	m.ResponderResources, m.InitiatorDepth = d[24], d[25]
	m.TargetACKDelay, m.FailoverAccepted, m.EndToEndFlowControl = field(d[26], 0, 5), field(d[26], 5, 2), flagBit(d[26], 7)
	m.RNRRetryCount, m.SRQ = field(d[27], 0, 3), flagBit(d[27], 3)
	m.LocalCAGUID = be64(d[28:])
	copy(m.PrivateData[:], d[36:])
	return nil
}

func (m *REP) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("local QPN", uint64(m.LocalQPN), max24)
	c.max("vendor ID", uint64(m.VendorID), max24)
	c.max("local EECN", uint64(m.LocalEECN), max24)
	c.max("starting PSN", uint64(m.StartingPSN), max24)
	c.max("target ACK delay", uint64(m.TargetACKDelay), max5)
	c.max("failover accepted", uint64(m.FailoverAccepted), max2)
	c.max("RNR retry count", uint64(m.RNRRetryCount), max3)
	if err := c.err("encode rep"); err != nil {
		return err
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	put32(d[8:], m.LocalQKey)
	put24(d[12:], m.LocalQPN)
	put24(d[16:], m.LocalEECN)
	put24(d[20:], m.StartingPSN)
	d[15], d[19], d[23] = byte(m.VendorID>>16), byte(m.VendorID>>8), byte(m.VendorID)
	d[24], d[25] = m.ResponderResources, m.InitiatorDepth
	setField(&d[26], 0, 5, m.TargetACKDelay)
	setField(&d[26], 5, 2, m.FailoverAccepted)
	setFlag(&d[26], 7, m.EndToEndFlowControl)
	setField(&d[27], 0, 3, m.RNRRetryCount)
	setFlag(&d[27], 3, m.SRQ)
	put64(d[28:], m.LocalCAGUID)
	copy(d[36:], m.PrivateData[:])
	return nil
}

// String summarises the REP: "REP comm_id=… remote_comm_id=… qpn=… psn=…".
func (m *REP) String() string {
	return "REP comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" qpn=" + hex(m.LocalQPN) + " psn=" + hex(m.StartingPSN)
}
