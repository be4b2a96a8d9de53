package roce

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/roce/wire"
)

// The CM agent is a device's QP1 (the GSI queue pair: UD, QPN 1, Q_Key
// 0x80010000). It is created on the first ListenCM or DialCM: until then
// frames to QP1 are dropped and counted as to an unknown QPN. It receives
// every MAD in one goroutine, decodes it with cm/rdmacm and hands it to the
// connection it belongs to; its sends are UD SENDs of 256 bytes to the
// peer's QP1 with AckReq set (roce/qp does that for QPN 1), as rxe's QP1
// sends them. On a client of the xdproce daemon every client has a QP1:
// the daemon steers each MAD to the client it is for, by the service IDs
// ListenCM registered with it and by communication IDs, which come from the
// range the daemon gave this client (internal/daemon/cm_linux.go).
type cmAgent struct {
	d     *Device
	pd    *PD
	cq    *CQ
	qp    *QP
	mr    *MR
	buf   []byte
	tidHi uint32 // upper half of our transaction IDs (Linux: the MAD agent's)
	guid  uint64 // local CA GUID: the EUI-64 of the device's MAC

	sendMu    sync.Mutex  // guards sendFree and sendWait (cm_send.go)
	sendFree  []int       // send slots not in flight
	sendWait  []cmPending // MADs waiting for a send slot, oldest first
	sendDrops atomic.Uint64
	sent      atomic.Uint64 // MADs posted or queued (cm_stats.go)
	resent    atomic.Uint64 // of them, resends after a response timeout
	received  atomic.Uint64 // MADs received

	listenMu  sync.Mutex // serializes listen and unlisten (they ask the daemon in between)
	mu        sync.Mutex
	listeners map[cmPort]any       // *CMListener, *SIDRListener (cm_port.go)
	conns     map[uint32]*cmConn   // by local communication ID
	byRemote  map[cmRemote]*cmConn // by the peer's (GID, communication ID)
	byPeerQP  map[cmPeerQP]*cmConn // established, by the peer's (GID, QPN): stale-connection check
	peak      int                  // most connections held since the maps were made (forget remakes them)
	// SIDR (cm_sidr_*.go): requests received (pending, or answered and
	// kept in the sidrKept ring from sidrNext on), requests sent by request
	// ID (drawn with the communication IDs).
	sidrIn    map[sidrKey]*sidrIn
	sidrKept  []sidrKey
	sidrNext  int
	sidrOut   map[uint32]*sidrOut
	malformed atomic.Uint64 // MADs dropped as undecodable
	stop      context.CancelFunc
	done      chan struct{}
}

type cmRemote struct {
	gid    netip.Addr
	commID uint32
}

type cmPeerQP struct {
	gid netip.Addr
	qpn uint32
}

const (
	cmRecvSlots = 512 // as Linux's MAD layer (ib_mad's mad_recvq_size): a burst of REQs or DREQs finds receives posted
	cmSendSlots = 64
	cmSlotLen   = 40 + rdmacm.MADLen // GRH area + MAD
	cmSendWRID  = 1 << 32            // send WR IDs have this bit; receive WR IDs are slot numbers
)

// cm returns the device's CM agent, creating QP1 on first use.
func (d *Device) cm() (*cmAgent, error) {
	d.cmOnce.Do(func() {
		d.cmAg, d.cmErr = newCMAgent(d)
		if d.cmAg != nil {
			d.cmLive.Store(d.cmAg)
		}
	})
	if d.cmAg == nil && d.cmErr == nil {
		return nil, fmt.Errorf("roce: qp1: %w", d.closedErr())
	}
	return d.cmAg, d.cmErr
}

func newCMAgent(d *Device) (*cmAgent, error) {
	a := &cmAgent{d: d, listeners: map[cmPort]any{}, conns: map[uint32]*cmConn{},
		byRemote: map[cmRemote]*cmConn{}, byPeerQP: map[cmPeerQP]*cmConn{}, done: make(chan struct{}), sidrIn: map[sidrKey]*sidrIn{}, sidrOut: map[uint32]*sidrOut{}}
	a.tidHi = randUint32()
	hw := d.hw
	a.guid = binary.BigEndian.Uint64([]byte{hw[0] ^ 2, hw[1], hw[2], 0xff, 0xfe, hw[3], hw[4], hw[5]})
	var err error
	if a.cq, err = d.CreateCQ(cmRecvSlots + cmSendSlots); err != nil {
		return nil, fmt.Errorf("roce: qp1: %w", err)
	}
	a.pd = d.AllocPD()
	a.buf = make([]byte, (cmRecvSlots+cmSendSlots)*cmSlotLen)
	if a.mr, err = a.pd.RegMR(a.buf, LocalWrite); err != nil {
		return nil, fmt.Errorf("roce: qp1: %w", err)
	}
	if a.qp, err = a.pd.CreateQP(QPConfig{Type: UD, SendCQ: a.cq, RecvCQ: a.cq, QPN: 1,
		MaxSendWR: cmSendSlots, MaxRecvWR: cmRecvSlots, MaxSGE: 1, MaxInline: -1}); err != nil {
		return nil, fmt.Errorf("roce: qp1: %w", err)
	}
	if err := a.qp.Activate(wire.GSIQKey, 0); err != nil {
		return nil, fmt.Errorf("roce: qp1: %w", err)
	}
	for i := range cmSendSlots {
		a.sendFree = append(a.sendFree, cmRecvSlots+i)
	}
	for i := range cmRecvSlots {
		if err := a.postRecv(i); err != nil {
			return nil, fmt.Errorf("roce: qp1: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go a.run(ctx)
	return a, nil
}

func (a *cmAgent) postRecv(slot int) error {
	return a.qp.PostRecv(RecvWR{ID: uint64(slot), SGL: []SGE{{Addr: a.mr.Addr() + uint64(slot*cmSlotLen), Length: cmSlotLen, LKey: a.mr.LKey()}}})
}

// run receives MADs until the device closes.
func (a *cmAgent) run(ctx context.Context) {
	defer close(a.done)
	var wcs [16]WC
	for {
		n, err := a.cq.Wait(ctx, wcs[:])
		if err != nil {
			a.failAll(fmt.Errorf("qp1 stopped: %w", err))
			return
		}
		for _, wc := range wcs[:n] {
			if wc.ID&cmSendWRID != 0 {
				a.sendDone(int(wc.ID &^ cmSendWRID)) // the slot is free: the next MAD waiting goes out
				continue
			}
			slot := int(wc.ID)
			b := a.buf[slot*cmSlotLen : (slot+1)*cmSlotLen]
			if wc.Status == WCSuccess && wc.ByteLen == cmSlotLen {
				a.input(GRHSource(b[:40]), wc.SrcQPN, b[40:])
			} else {
				a.malformed.Add(1)
			}
			if wc.Status == WCWRFlushErr {
				continue
			}
			if err := a.postRecv(slot); err != nil {
				a.failAll(fmt.Errorf("qp1 receive: %w", err))
				return
			}
		}
	}
}

// GRHSource is the sender's address in the GRH area (the first GRHLen
// bytes) of a UD receive buffer: for IPv4, 20 zero bytes and then the IPv4
// header. It is what ibv_create_ah_from_wc reads; g must hold GRHLen bytes.
func GRHSource(g []byte) netip.Addr {
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[8:24]))
	}
	return netip.AddrFrom4([4]byte(g[32:36]))
}

// input dispatches one received MAD. Undecodable MADs and those of other
// classes are dropped and counted; a valid message for no connection is
// answered as Linux's CM answers it (REJ invalid service ID for a REQ to no
// listener, REJ stale connection or silence otherwise).
func (a *cmAgent) input(src netip.Addr, srcQP uint32, mad []byte) {
	a.received.Add(1)
	h, m, err := rdmacm.Decode(mad)
	if err != nil || srcQP != 1 {
		a.malformed.Add(1)
		return
	}
	switch m := m.(type) {
	case *rdmacm.REQ:
		a.inputREQ(src, h, m)
	case *rdmacm.LAP:
		// Path migration is not supported: APR says so.
		apr := &rdmacm.APR{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID, Status: rdmacm.APRUnsupported}
		a.send(src, rdmacm.CMHeader(h.TID), apr) //nolint:errcheck // the peer retries its LAP
	case *rdmacm.SIDRReq:
		a.inputSIDRReq(src, h, m)
	case *rdmacm.SIDRRep:
		a.inputSIDRRep(src, m)
	default:
		c := a.lookup(mad)
		if c == nil {
			a.orphan(src, h, m)
			return
		}
		c.input(src, h, m)
	}
}

// orphan answers a message for a connection this side does not have, as
// Linux's CM does: a REP with REJ invalid comm ID (the peer stops waiting),
// a DREQ with DREP (the peer's disconnect completes); others are dropped.
func (a *cmAgent) orphan(src netip.Addr, h rdmacm.Header, m rdmacm.Message) {
	switch m := m.(type) {
	case *rdmacm.REP:
		rej := &rdmacm.REJ{RemoteCommID: m.LocalCommID, MessageRejected: rdmacm.MsgREP, Reason: rdmacm.RejInvalidCommID}
		a.send(src, rdmacm.CMHeader(h.TID), rej) //nolint:errcheck // the peer retries its REP
	case *rdmacm.DREQ:
		drep := &rdmacm.DREP{RemoteCommID: m.LocalCommID}
		a.send(src, rdmacm.CMHeader(h.TID), drep) //nolint:errcheck // the peer retries its DREQ
	}
}

// lookup finds the connection a message other than REQ (and LAP, SIDR)
// belongs to by the receiver's communication ID: REP, RTU, MRA, REJ, DREQ
// and DREP all carry it at message byte 4 (IBA Vol 1, 12.6).
func (a *cmAgent) lookup(mad []byte) *cmConn {
	remote := binary.BigEndian.Uint32(mad[rdmacm.HeaderLen+4:])
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[remote]
}

// register gives c an unused random local communication ID and files it
// under it.
func (a *cmAgent) register(c *cmConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c.localID = a.newCommID()
	a.conns[c.localID] = c
	a.peak = max(a.peak, len(a.conns))
}

// newCommID returns an unused random local communication ID (or SIDR
// request ID): any but 0, or on a client of the xdproce daemon one of the
// range the daemon steers to it (Options.commIDs). a.mu is held.
func (a *cmAgent) newCommID() uint32 {
	lo, hi := a.d.opts.commIDs[0], a.d.opts.commIDs[1]
	for {
		id := randUint32()
		if hi != 0 {
			id = lo + id%(hi-lo+1)
		}
		if id != 0 && a.conns[id] == nil && a.sidrOut[id] == nil {
			return id
		}
	}
}

// forget removes c from the agent's tables.
func (a *cmAgent) forget(c *cmConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conns[c.localID] == c {
		delete(a.conns, c.localID)
	}
	if k := (cmRemote{c.peer, c.remoteID}); a.byRemote[k] == c {
		delete(a.byRemote, k)
	}
	if k := (cmPeerQP{c.peer, c.remoteQPN}); a.byPeerQP[k] == c {
		delete(a.byPeerQP, k)
	}
	if shrunk(len(a.conns), a.peak) { // after many connections: give their maps' memory back
		a.conns, a.byRemote, a.byPeerQP = remade(a.conns), remade(a.byRemote), remade(a.byPeerQP)
		a.peak = len(a.conns)
	}
}

// failAll ends every connection attempt in progress with err.
func (a *cmAgent) failAll(err error) {
	a.mu.Lock()
	conns := make([]*cmConn, 0, len(a.conns))
	for _, c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		c.fail(err)
	}
}

// close stops the agent (the device is closing).
func (a *cmAgent) close() {
	a.stop()
	<-a.done
}

func randUint32() uint32 {
	var b [4]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
	return binary.BigEndian.Uint32(b[:])
}

// errCMClosed is returned by CM calls on a closed listener or device.
var errCMClosed = errors.New("closed")
