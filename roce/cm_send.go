package roce

import (
	"net/netip"

	"github.com/xdproce/xdproce/cm/rdmacm"
	"github.com/xdproce/xdproce/roce/wire"
)

// QP1's sends: each MAD is copied into a free send slot of the agent's
// buffer and posted as one UD SEND; the slot is free again when its send
// completes (sendDone, from the agent's goroutine). With every slot in
// flight (many connections set up at once) a MAD waits in sendWait for the
// next free slot; beyond cmSendQueue waiting it is dropped and counted, as
// a lost frame would be: the CM's retries resend it.

// cmSendQueue bounds the MADs waiting for a send slot.
const cmSendQueue = 4096

// cmPending is a MAD waiting for a send slot.
type cmPending struct {
	ah  *AH
	mad []byte
}

// send encodes h and m and sends them to QP1 at peer.
func (a *cmAgent) send(peer netip.Addr, h rdmacm.Header, m rdmacm.Message) ([]byte, error) {
	var mad [rdmacm.MADLen]byte
	if _, err := rdmacm.Encode(mad[:], h, m); err != nil {
		return nil, err
	}
	return mad[:], a.sendRaw(peer, mad[:])
}

// sendRaw sends one encoded MAD (a resend of a kept message, or a new one)
// or queues it until a send slot is free.
func (a *cmAgent) sendRaw(peer netip.Addr, mad []byte) error {
	ah, err := a.d.CreateAH(GIDFromIP(peer), 1, wire.GSIQKey)
	if err != nil {
		return err
	}
	a.sent.Add(1)
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	if len(a.sendFree) == 0 {
		if len(a.sendWait) >= cmSendQueue {
			a.sendDrops.Add(1)
			return nil
		}
		a.sendWait = append(a.sendWait, cmPending{ah, append([]byte(nil), mad...)})
		return nil
	}
	slot := a.sendFree[len(a.sendFree)-1]
	a.sendFree = a.sendFree[:len(a.sendFree)-1]
	if err := a.post(slot, ah, mad); err != nil {
		a.sendFree = append(a.sendFree, slot)
		return err
	}
	return nil
}

// sendDone frees slot, whose send completed, or gives it to the oldest MAD
// waiting.
func (a *cmAgent) sendDone(slot int) {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	for len(a.sendWait) > 0 {
		p := a.sendWait[0]
		a.sendWait[0] = cmPending{}
		a.sendWait = a.sendWait[1:]
		if a.post(slot, p.ah, p.mad) == nil {
			return
		}
		a.sendDrops.Add(1)
	}
	a.sendFree = append(a.sendFree, slot)
}

// post sends mad from slot; a.sendMu is held.
func (a *cmAgent) post(slot int, ah *AH, mad []byte) error {
	off := slot * cmSlotLen
	copy(a.buf[off:off+rdmacm.MADLen], mad)
	return a.qp.PostSendAH(SendWR{ID: cmSendWRID | uint64(slot), Opcode: WRSend, Flags: Signaled,
		SGL: []SGE{{Addr: a.mr.Addr() + uint64(off), Length: rdmacm.MADLen, LKey: a.mr.LKey()}}}, ah)
}
