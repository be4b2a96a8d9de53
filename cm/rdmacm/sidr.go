package rdmacm

import "strconv"

// SIDR sizes (IBA Vol 1, 12.11): SIDR_REQ private data 216 bytes at byte
// 16; SIDR_REP additional information 72 bytes at byte 24 and private data
// 136 bytes at byte 96.
const (
	SIDRReqPrivateDataLen = 216
	SIDRRepPrivateDataLen = 136
	SIDRInfoLen           = 72
)

// SIDRReq, service ID resolution request (IBA Vol 1, 12.11.1, table 119):
// how a UD client (RDMA_PS_UDP, udaddy) learns the server's QPN and Q_Key.
// Bytes 0 RequestID, 4 PKey, 8 ServiceID (64), 16 private data (216, which
// librdmacm starts with its IP CM header).
type SIDRReq struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRReqPrivateDataLen]byte
}

// AttrID returns AttrSIDRReq.
func (*SIDRReq) AttrID() AttrID { return AttrSIDRReq }

func (m *SIDRReq) decode(d *[DataLen]byte) error {
	m.RequestID, m.PKey, m.ServiceID = be32(d[0:]), be16(d[4:]), be64(d[8:])
	copy(m.PrivateData[:], d[16:])
	return nil
}

func (m *SIDRReq) encode(d *[DataLen]byte) error {
	put32(d[0:], m.RequestID)
	put16(d[4:], m.PKey)
	put64(d[8:], m.ServiceID)
	copy(d[16:], m.PrivateData[:])
	return nil
}

// String summarises the SIDR_REQ: "SIDR_REQ request_id=… service_id=…", then
// the IP CM header's addresses when the private data starts with one.
func (m *SIDRReq) String() string {
	return "SIDR_REQ request_id=" + hex32(m.RequestID) + " service_id=" + hex64(m.ServiceID) +
		ipSummary(m.ServiceID, m.PrivateData[:])
}

// SIDRStatus is SIDR_REP's status (IBA Vol 1, 12.11.2, table 121; Linux
// enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // no listener for the service ID
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

var sidrStatusNames = [...]string{"success", "unsupported", "reject", "no QP", "redirect", "unsupported version"}

// String returns the status in words ("success") or "status N".
func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusNames) {
		return sidrStatusNames[s]
	}
	return "status " + strconv.Itoa(int(s))
}

// SIDRRep, service ID resolution response (IBA Vol 1, 12.11.2, table 120).
// Byte offsets from the start of the message:
//
//	 0 RequestID   4 Status   5 AdditionalInfoLength   6 VendorID bits 23..8
//	 8 QPN (24) | 11 VendorID bits 7..0   12 ServiceID (64)   20 QKey
//	24 additional information (72)   96 private data (136)
type SIDRRep struct {
	RequestID uint32
	Status    SIDRStatus
	// InfoLength is how many bytes of Info count (at most SIDRInfoLen;
	// decode refuses more).
	InfoLength  uint8
	VendorID    uint32 // 24 bits, ECE
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        [SIDRInfoLen]byte
	PrivateData [SIDRRepPrivateDataLen]byte
}

// AttrID returns AttrSIDRRep.
func (*SIDRRep) AttrID() AttrID { return AttrSIDRRep }

func (m *SIDRRep) decode(d *[DataLen]byte) error {
	m.RequestID, m.Status, m.InfoLength = be32(d[0:]), SIDRStatus(d[4]), d[5]
	m.VendorID = uint32(be16(d[6:]))<<8 | uint32(d[11])
	m.QPN, m.ServiceID, m.QKey = u24(d[8:]), be64(d[12:]), be32(d[20:])
	copy(m.Info[:], d[24:96])
	copy(m.PrivateData[:], d[96:])
	if m.InfoLength > SIDRInfoLen {
		return errSIDRInfoLen
	}
	return nil
}

func (m *SIDRRep) encode(d *[DataLen]byte) error {
	var c rangeCheck
	c.max("additional info length", uint64(m.InfoLength), SIDRInfoLen)
	c.max("vendor ID", uint64(m.VendorID), max24)
	c.max("QPN", uint64(m.QPN), max24)
	if err := c.err("encode sidr_rep"); err != nil {
		return err
	}
	put32(d[0:], m.RequestID)
	d[4], d[5] = uint8(m.Status), m.InfoLength
	put16(d[6:], uint16(m.VendorID>>8))
	put24(d[8:], m.QPN)
	d[11] = byte(m.VendorID)
	put64(d[12:], m.ServiceID)
	put32(d[20:], m.QKey)
	copy(d[24:96], m.Info[:])
	copy(d[96:], m.PrivateData[:])
	return nil
}

// String summarises the SIDR_REP: "SIDR_REP request_id=… status=0 (success) qpn=… qkey=…".
func (m *SIDRRep) String() string {
	return "SIDR_REP request_id=" + hex32(m.RequestID) + " status=" + strconv.Itoa(int(m.Status)) +
		" (" + m.Status.String() + ") qpn=" + hex(m.QPN) + " qkey=" + hex32(m.QKey)
}
