package rdmacm

// Private data sizes of DREQ and DREP (IBA Vol 1, 12.6.10 and 12.6.11).
const (
	DREQPrivateDataLen = 220
	DREPPrivateDataLen = RTUPrivateDataLen
)

// DREQ, disconnection request (IBA Vol 1, 12.6.10, table 112). Bytes 0
// LocalCommID, 4 RemoteCommID, 8 RemoteQPN/EECN (24 bits), 12 private data
// (220).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData  [DREQPrivateDataLen]byte
}

// AttrID returns AttrDREQ.
func (*DREQ) AttrID() AttrID { return AttrDREQ }

func (m *DREQ) decode(d *[DataLen]byte) error {
	m.LocalCommID, m.RemoteCommID, m.RemoteQPN = be32(d[0:]), be32(d[4:]), u24(d[8:])
	copy(m.PrivateData[:], d[12:])
	return nil
}

func (m *DREQ) encode(d *[DataLen]byte) error {
	if m.RemoteQPN > max24 {
		return &Error{Op: "encode dreq", Msg: "remote QPN out of range", Err: ErrBadField}
	}
	put32(d[0:], m.LocalCommID)
	put32(d[4:], m.RemoteCommID)
	put24(d[8:], m.RemoteQPN)
	copy(d[12:], m.PrivateData[:])
	return nil
}

// String summarises the DREQ: "DREQ comm_id=… remote_comm_id=… remote_qpn=…".
func (m *DREQ) String() string {
	return "DREQ comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID) +
		" remote_qpn=" + hex(m.RemoteQPN)
}

// DREP, disconnection reply (IBA Vol 1, 12.6.11, table 113), has RTU's
// layout: bytes 0 LocalCommID, 4 RemoteCommID, 8 private data (224).
type DREP RTU

// AttrID returns AttrDREP.
func (*DREP) AttrID() AttrID { return AttrDREP }

func (m *DREP) decode(d *[DataLen]byte) error { return (*RTU)(m).decode(d) }
func (m *DREP) encode(d *[DataLen]byte) error { return (*RTU)(m).encode(d) }

// String summarises the DREP: "DREP comm_id=… remote_comm_id=…".
func (m *DREP) String() string {
	return "DREP comm_id=" + hex32(m.LocalCommID) + " remote_comm_id=" + hex32(m.RemoteCommID)
}
