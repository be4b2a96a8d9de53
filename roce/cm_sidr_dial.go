package roce

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// A SIDRReply is the passive side's answer to DialSIDR: where to send UD
// datagrams (RDMA_CM_EVENT_ESTABLISHED on a UDP id, event.param.ud).
type SIDRReply struct {
	// AH addresses the peer's UD queue pair: its GID, QPN and Q_Key.
	AH *AH
	// QPN and QKey are the SIDR_REP's.
	QPN, QKey uint32
	// PrivateData is the SIDR_REP's private data (136 bytes).
	PrivateData []byte
	// Remote is the address and port dialed.
	Remote netip.AddrPort
}

// sidrOut is a SIDR_REQ this side sent, waiting for its SIDR_REP.
type sidrOut struct {
	peer netip.Addr
	rep  chan *rdmacm.SIDRRep
}

// DialSIDR resolves the UD service at dst (address and rdma_cm port,
// RDMA_PS_UDP), as rdma_connect does on a UDP id: it sends a SIDR_REQ with
// librdmacm's IP CM header and up to 180 bytes of priv, resends it each
// Timeout(o.ResponseTimeout) up to o.MaxRetries times, and returns the QPN
// and Q_Key of the SIDR_REP. ctx bounds the whole exchange. A SIDR_REP
// with another status returns *SIDRError; no answer an error matching
// ErrCMTimeout. No queue pair is involved on this side: send from any UD
// queue pair of the device to the reply's AH.
func (d *Device) DialSIDR(ctx context.Context, dst netip.AddrPort, priv []byte, o *CMOptions) (*SIDRReply, error) {
	r, err := d.dialSIDR(ctx, dst, priv, o)
	if err != nil {
		return nil, fmt.Errorf("roce: sidr dial %v: %w", dst, err)
	}
	return r, nil
}

func (d *Device) dialSIDR(ctx context.Context, dst netip.AddrPort, priv []byte, o *CMOptions) (*SIDRReply, error) {
	opt := o.norm()
	if len(priv) > rdmacm.SIDRReqUserDataMax {
		return nil, fmt.Errorf("%d bytes of private data; a SIDR_REQ carries at most %d", len(priv), rdmacm.SIDRReqUserDataMax)
	}
	peer := dst.Addr().Unmap()
	av, err := d.resolveAV(GIDFromIP(peer), netip.Addr{}, false)
	if err != nil {
		return nil, err
	}
	a, err := d.cm()
	if err != nil {
		return nil, err
	}
	w := &sidrOut{peer: peer, rep: make(chan *rdmacm.SIDRRep, 1)}
	a.mu.Lock()
	id := a.newCommID()
	a.sidrOut[id] = w
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.sidrOut, id)
		a.mu.Unlock()
	}()
	req := &rdmacm.SIDRReq{RequestID: id, PKey: 0xFFFF, ServiceID: rdmacm.ServiceID(rdmacm.PSUDP, dst.Port())}
	srcPort := uint16(32768 + rand.IntN(28232)) // an ephemeral port, as the kernel picks one
	if err := (rdmacm.IPHeader{SrcPort: srcPort, Src: av.SrcIP, Dst: peer}).Put(req.PrivateData[:], priv); err != nil {
		return nil, err
	}
	mad, err := a.send(peer, rdmacm.CMHeader(uint64(a.tidHi)<<32|uint64(id)), req)
	if err != nil {
		return nil, err
	}
	wait := rdmacm.Timeout(opt.ResponseTimeout)
	t := time.NewTimer(wait)
	defer t.Stop()
	for tries := 0; ; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.done:
			return nil, fmt.Errorf("qp1 %w", errCMClosed)
		case rep := <-w.rep:
			if rep.Status != rdmacm.SIDRSuccess {
				return nil, &SIDRError{Status: rep.Status, PrivateData: trimZeros(rep.PrivateData[:])}
			}
			ah, err := d.CreateAH(GIDFromIP(peer), rep.QPN, rep.QKey)
			if err != nil {
				return nil, err
			}
			return &SIDRReply{AH: ah, QPN: rep.QPN, QKey: rep.QKey, PrivateData: append([]byte(nil), rep.PrivateData[:]...),
				Remote: netip.AddrPortFrom(peer, dst.Port())}, nil
		case <-t.C:
			if tries == int(opt.MaxRetries) {
				return nil, fmt.Errorf("%d tries %v apart: %w", tries+1, wait, ErrCMTimeout)
			}
			tries++
			if err := a.sendRaw(peer, mad); err != nil {
				return nil, err
			}
			t.Reset(wait)
		}
	}
}

// inputSIDRRep hands a SIDR_REP to the DialSIDR waiting for it (same
// request ID and sender; the service ID is not checked, as Linux does not);
// others are dropped.
func (a *cmAgent) inputSIDRRep(src netip.Addr, m *rdmacm.SIDRRep) {
	a.mu.Lock()
	w := a.sidrOut[m.RequestID]
	a.mu.Unlock()
	if w == nil || w.peer != src {
		return
	}
	select {
	case w.rep <- m:
	default: // a duplicate: the first is being handled
	}
}
