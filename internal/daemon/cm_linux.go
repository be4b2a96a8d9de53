package daemon

// QP1 through the daemon (issues 17 and 19). On the wire the device has one
// QP1; behind the daemon every client runs its own (roce's CM agent over
// the client's port) and the daemon steers each CM MAD to the client it is
// for:
//   - REQ and SIDR_REQ by service ID, to the client that took it (OpListen;
//     one client per service ID);
//   - SIDR_REP by its request ID, every other CM message (REP, RTU, MRA,
//     REJ, DREQ, DREP, LAP, APR) by the receiver's communication ID at
//     message byte 4, to the client whose communication IDs contain it:
//     each client has a range, like its QPNs (commRange), and its QP1 may
//     send only MADs whose own ID (message byte 0) is in it (REJ and DREP
//     may also carry 0: Linux's answers for a connection it does not have).
// A MAD no client takes is answered as Linux's CM answers it: a REQ with
// REJ invalid service ID, a SIDR_REQ with SIDR_REP "not supported", a REP
// with REJ invalid communication ID, a DREQ with DREP; others are dropped
// and counted (drop_qp1).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/roce/wire"
)

// maxServices bounds the service IDs one client may hold.
const maxServices = 1024

// qp1FrameMax is the longest QP1 frame: Ethernet, IPv4 with options, UDP,
// BTH, DETH, the MAD and the ICRC.
const qp1FrameMax = ethLen + 60 + udpLen + bthLen + dethLen + rdmacm.MADLen + 4

// services maps RDMA CM service IDs to the clients that listen on them.
type services struct {
	mu sync.Mutex
	m  map[uint64]*client
}

// commRange is the communication IDs of QPN block b: those whose top bits
// (as many as the block number has) are b, 0 excepted.
func (d *Daemon) commRange(b int) (first, last uint32) {
	s := 8 + d.shift
	first, last = uint32(b)<<s, uint32(b)<<s|(1<<s-1)
	return max(first, 1), last
}

// commOwner is the client whose communication IDs contain id.
func (d *Daemon) commOwner(id uint32) *client { return d.owners[id>>(8+d.shift)].Load() }

// listen gives service ID sid to c.
func (d *Daemon) listen(c *client, sid uint64) error {
	s := &d.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]*client{}
	}
	switch o := s.m[sid]; {
	case o == c:
		return nil
	case o != nil:
		return fmt.Errorf("service ID %#x is taken by client %d (PID %d)", sid, o.id, o.pid)
	case c.services >= maxServices:
		return fmt.Errorf("a client holds at most %d service IDs", maxServices)
	}
	s.m[sid] = c
	c.services++
	return nil
}

// unlisten takes service ID sid from c.
func (d *Daemon) unlisten(c *client, sid uint64) error {
	s := &d.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[sid] != c {
		return fmt.Errorf("service ID %#x is not this client's", sid)
	}
	delete(s.m, sid)
	c.services--
	return nil
}

// dropServices takes every service ID from c (it detached).
func (d *Daemon) dropServices(c *client) {
	s := &d.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	for sid, o := range s.m {
		if o == c {
			delete(s.m, sid)
		}
	}
	c.services = 0
}

func (d *Daemon) service(sid uint64) *client {
	s := &d.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[sid]
}

// madOf returns the MAD a QP1 frame b (header h) carries: a UD SEND only
// without padding whose payload is one MAD; nil otherwise.
func madOf(b []byte, h *header) []byte {
	at := h.bth + bthLen + dethLen
	if !h.ud || b[h.bth] != opUDSend || b[h.bth+1]&0x30 != 0 || len(b) != at+rdmacm.MADLen+4 {
		return nil
	}
	return b[at : at+rdmacm.MADLen]
}

// madRoute is the client a CM MAD is for (nil: none), by service ID or
// communication ID.
func (d *Daemon) madRoute(mad []byte) (*client, rdmacm.AttrID) {
	h, err := rdmacm.ParseHeader(mad)
	if err != nil {
		return nil, 0
	}
	msg := mad[rdmacm.HeaderLen:]
	switch h.AttrID {
	case rdmacm.AttrREQ, rdmacm.AttrSIDRReq:
		return d.service(binary.BigEndian.Uint64(msg[8:])), h.AttrID
	case rdmacm.AttrSIDRRep:
		return d.commOwner(binary.BigEndian.Uint32(msg[0:])), h.AttrID
	}
	return d.commOwner(binary.BigEndian.Uint32(msg[4:])), h.AttrID
}

// mayCMSend reports whether client c's QP1 may send mad, a CM MAD: one
// whose sender's ID is c's (see the top of this file).
func (d *Daemon) mayCMSend(c *client, mad []byte) bool {
	id := binary.BigEndian.Uint32(mad[rdmacm.HeaderLen:])
	switch rdmacm.AttrID(binary.BigEndian.Uint16(mad[16:])) {
	case rdmacm.AttrSIDRRep:
		return true // an answer: it names the requester's ID only
	case rdmacm.AttrREJ, rdmacm.AttrDREP:
		if id == 0 {
			return true
		}
	}
	return id >= c.commFirst && id <= c.commLast
}

// fromClientQP1 steers a frame from c's QP1: the whole frame is copied out
// of the shared memory, checked (addresses, a CM MAD c may send) and
// forwarded from the copy.
func (d *Daemon) fromClientQP1(c *client, frame []byte) {
	if len(frame) > len(c.whole) {
		c.dropMalformed.Add(1)
		return
	}
	b := c.whole[:copy(c.whole[:], frame)]
	h := &c.hdr
	var mad []byte
	if parse(b, h) {
		mad = madOf(b, h)
	}
	if _, err := rdmacm.ParseHeader(mad); err != nil {
		mad = nil // not a CM MAD
	}
	switch {
	case mad == nil || h.sqpn != qp1 || h.dqpn != qp1:
		c.dropMalformed.Add(1)
		return
	case !d.isLocal(&h.src):
		c.dropBadSource.Add(1)
		return
	case !d.mayCMSend(c, mad):
		c.dropForeign.Add(1)
		return
	}
	if d.isLocal(&h.dst) {
		if d.steerQP1(frame, b, h) {
			d.st.switched.Add(1)
		}
		return
	}
	d.toWire(c, frame, b, h)
}

// steerQP1 delivers a frame to QPN 1 (its bytes: frame, or hdr when not
// nil, a private copy of all of it) to the client the MAD is for, or
// answers it for a client that is not there.
func (d *Daemon) steerQP1(frame, hdr []byte, h *header) bool {
	b := frame
	if hdr != nil {
		b = hdr
	}
	mad := madOf(b, h)
	if mad == nil {
		d.st.dropQP1.Add(1)
		return false
	}
	to, attr := d.madRoute(mad)
	if to != nil {
		to.deliver(frame, hdr)
		return true
	}
	if !d.answerMAD(b, mad, attr) {
		d.st.dropQP1.Add(1)
	}
	return false
}

// answerMAD answers a MAD no client takes (in: its frame) as Linux's CM
// does; it reports whether it did.
func (d *Daemon) answerMAD(in, mad []byte, attr rdmacm.AttrID) bool {
	var reply rdmacm.Message
	switch attr {
	case rdmacm.AttrREQ:
		var m rdmacm.REQ
		if _, err := rdmacm.DecodeInto(mad, &m); err == nil {
			reply = &rdmacm.REJ{RemoteCommID: m.LocalCommID, MessageRejected: rdmacm.MsgREQ, Reason: rdmacm.RejInvalidServiceID}
		}
	case rdmacm.AttrSIDRReq:
		var m rdmacm.SIDRReq
		if _, err := rdmacm.DecodeInto(mad, &m); err == nil {
			reply = &rdmacm.SIDRRep{RequestID: m.RequestID, Status: rdmacm.SIDRUnsupported, ServiceID: m.ServiceID}
		}
	case rdmacm.AttrREP:
		var m rdmacm.REP
		if _, err := rdmacm.DecodeInto(mad, &m); err == nil {
			reply = &rdmacm.REJ{RemoteCommID: m.LocalCommID, MessageRejected: rdmacm.MsgREP, Reason: rdmacm.RejInvalidCommID}
		}
	case rdmacm.AttrDREQ:
		var m rdmacm.DREQ
		if _, err := rdmacm.DecodeInto(mad, &m); err == nil {
			reply = &rdmacm.DREP{RemoteCommID: m.LocalCommID}
		}
	}
	if reply == nil {
		return false
	}
	out, err := d.madReply(in, binary.BigEndian.Uint64(mad[8:]), reply)
	if err != nil {
		d.log.Debug("qp1 answer not made", "err", err)
		return false
	}
	d.st.cmAnswered.Add(1)
	var h header
	parse(out, &h)
	if d.isLocal(&h.dst) {
		d.steerQP1(out, nil, &h) // to a client of this daemon: a reply is not answered again
	} else {
		d.eg.tryPush(out, d.up.Link)
	}
	return true
}

// madReply encodes a frame carrying m (transaction ID tid) from QP1 here to
// QP1 of the sender of the frame in.
func (d *Daemon) madReply(in []byte, tid uint64, m rdmacm.Message) ([]byte, error) {
	var p wire.Packet
	if err := p.Decode(in); err != nil {
		return nil, err
	}
	var mad [rdmacm.MADLen]byte
	if _, err := rdmacm.Encode(mad[:], rdmacm.CMHeader(tid), m); err != nil {
		return nil, err
	}
	r := wire.Packet{DstMAC: p.SrcMAC, SrcMAC: d.hw, IPv6: p.IPv6, SrcIP: p.DstIP, DstIP: p.SrcIP, TTL: 64, IPFlags: wire.IPv4DontFragment,
		SrcPort: p.SrcPort, DstPort: rocePort, Payload: mad[:]}
	if sp := d.up.Link.Props().SrcPort; sp != 0 {
		r.SrcPort = sp
	}
	r.BTH.Opcode, r.BTH.DestQPN, r.BTH.PKey = wire.UDSendOnly, qp1, 0xFFFF
	r.DETH = wire.DETH{QKey: wire.GSIQKey, SrcQPN: qp1}
	out := make([]byte, qp1FrameMax)
	n, err := r.Encode(out)
	if err != nil {
		return nil, err
	}
	if n > len(out) {
		return nil, errors.New("reply too long")
	}
	return out[:n], nil
}
