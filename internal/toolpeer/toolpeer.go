// Package toolpeer is xdproce's end of a run against rdma-core's pingpong
// tools and perftest: it drives one roce queue pair as those tools do, over
// the out-of-band exchanges of package cm. The CLI's pingpong and bench
// commands use it; package interop checks it against the real tools.
package toolpeer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// Peer is xdproce's end of a run against rdma-core's pingpong tools or perftest, over a
// connection already made (the client dialled the tool's port, or the server accepted the
// tool): one RC queue pair in RESET, the completion queue it sends and receives on, and a
// registered buffer. The runs do what the tools do, so the tools on the other side see a peer
// like themselves; package interop checks them against the real ones.
type Peer struct {
	QP *roce.QP
	CQ *roce.CQ // the QP's send and receive CQ, used by nothing else during the run
	// MR is the buffer: at least 2×size bytes for pingpong (receive half, send half), size
	// for perftest (8 for atomics), with remote write, read and atomic access for perftest's
	// server side.
	MR  *roce.MR
	GID cm.GID // this side's GID (the one rdma-core's -g / perftest's -x would name)
	PSN uint32 // first PSN this side sends; 0 draws a random one
	// Connect are the attributes of the QP's connection (nil: roce.DefaultConnectOptions).
	Connect *roce.ConnectOptions
	// OutReads is what perftest's key message announces as the READ/atomic depth this side
	// accepts (0: 16, roce's default MaxDestRdAtomic).
	OutReads uint16
	// GIDIndex is the index of GID in the device's table, which the key message of perftest's
	// rdma_cm mode carries.
	GIDIndex uint32
}

// PingpongResult is what a pingpong run did, printable as ibv_rc_pingpong prints it.
type PingpongResult struct {
	Local, Remote cm.PingpongDest
	Size, Iters   int
	Elapsed       time.Duration // from the first send (client) or receive (server) to the last completion
}

// Lines are ibv_rc_pingpong's output lines for the run: the two address lines, then bytes and
// iterations with their rates.
func (r PingpongResult) Lines() []string {
	return append([]string{
		"  local address:  " + r.Local.String(),
		"  remote address: " + r.Remote.String(),
	}, rateLines(r.Size, r.Iters, r.Elapsed)...)
}

// rateLines are the pingpong tools' last two lines: bytes (both directions) and iterations.
func rateLines(size, iters int, elapsed time.Duration) []string {
	usec := float64(elapsed.Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(size) * int64(iters) * 2
	return []string{
		fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec", bytes, usec/1e6, float64(bytes)*8/usec),
		fmt.Sprintf("%d iters in %.2f seconds = %.2f usec/iter", iters, usec/1e6, usec/float64(iters)),
	}
}

const (
	toolRecvID = 1
	toolSendID = 2
)

func (p *Peer) psn() uint32 {
	if p.PSN == 0 {
		p.PSN = rand.Uint32()&0xffffff | 1
	}
	return p.PSN & 0xffffff
}

func (p *Peer) connect(qpn, psn uint32, gid cm.GID) error {
	return p.QP.Connect(p.psn(), roce.Endpoint{QPN: qpn, PSN: psn, GID: netip.AddrFrom16(gid)}, p.Connect)
}

func (p *Peer) sge(off, n int) []roce.SGE {
	return []roce.SGE{{Addr: p.MR.Addr() + uint64(off), Length: uint32(n), LKey: p.MR.LKey()}}
}

func (p *Peer) postRecvs(n, off, size int) error {
	for range n {
		if err := p.QP.PostRecv(roce.RecvWR{ID: toolRecvID, SGL: p.sge(off, size)}); err != nil {
			return fmt.Errorf("toolpeer: post receive: %w", err)
		}
	}
	return nil
}

func (p *Peer) send(off, size int) error {
	if err := p.QP.PostSend(roce.SendWR{ID: toolSendID, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: p.sge(off, size)}); err != nil {
		return fmt.Errorf("toolpeer: post send: %w", err)
	}
	return nil
}

// poll waits for completions; an error status is an error naming the work request. Its errors
// have no "toolpeer: " (every caller adds it with what the run was doing).
func (p *Peer) poll(ctx context.Context, wcs []roce.WC) ([]roce.WC, error) {
	n, err := p.CQ.Wait(ctx, wcs)
	if err != nil {
		return nil, fmt.Errorf("wait for completions: %w", err)
	}
	for _, wc := range wcs[:n] {
		if wc.Status != roce.WCSuccess {
			return nil, fmt.Errorf("work request %d (%v): %v", wc.ID, wc.Opcode, wc.Status)
		}
	}
	return wcs[:n], nil
}

func (p *Peer) check(need int) error {
	if p.QP == nil || p.CQ == nil || p.MR == nil {
		return fmt.Errorf("toolpeer: tool peer needs QP, CQ and MR")
	}
	if p.MR.Len() < need {
		return fmt.Errorf("toolpeer: tool peer buffer of %d bytes, the run needs %d", p.MR.Len(), need)
	}
	return nil
}

// Pingpong runs ibv_rc_pingpong's exchange and its loop on conn: the client sends first, and
// each side sends its next message of size bytes once its previous send and a receive
// completed, iters messages each way. client is true when this side dialled.
func (p *Peer) Pingpong(ctx context.Context, conn net.Conn, client bool, size, iters int) (PingpongResult, error) {
	res := PingpongResult{Size: size, Iters: iters}
	if size <= 0 || iters <= 0 {
		return res, fmt.Errorf("toolpeer: pingpong: size %d and iterations %d must be positive", size, iters)
	}
	// RC and UC: receive half, then send half. UD (ibv_ud_pingpong): receives of size bytes
	// behind the 40-byte GRH area, sends of size bytes to the address handle.
	ud := p.QP.Type() == roce.UD
	recvLen := size
	if ud {
		recvLen += roce.GRHLen
	}
	if err := p.check(recvLen + size); err != nil {
		return res, err
	}
	res.Local = cm.PingpongDest{QPN: p.QP.QPN(), PSN: p.psn(), GID: p.GID}
	var ah *roce.AH
	ready := func(r cm.PingpongDest) error {
		var err error
		if ud {
			ah, err = p.activateUD(r)
		} else {
			err = p.connect(r.QPN, r.PSN, r.GID)
		}
		if err != nil {
			return err
		}
		return p.postRecvs(iters, 0, recvLen)
	}
	send := func() error {
		if ud {
			return p.sendAH(recvLen, size, ah)
		}
		return p.send(size, size)
	}
	var err error
	if client {
		if res.Remote, err = cm.DialPingpong(ctx, conn, res.Local); err != nil {
			return res, err
		}
		if err := ready(res.Remote); err != nil {
			return res, err
		}
	} else if res.Remote, err = cm.ServePingpong(ctx, conn, res.Local, ready); err != nil {
		return res, err
	}

	const pRecv, pSend = 1, 2
	pending := pRecv
	scnt, rcnt := 0, 0
	t0 := time.Now()
	if client {
		if err := send(); err != nil {
			return res, err
		}
		pending |= pSend
	}
	wcs := make([]roce.WC, 16)
	for scnt < iters || rcnt < iters {
		got, err := p.poll(ctx, wcs)
		if err != nil {
			return res, fmt.Errorf("toolpeer: pingpong after %d sends and %d receives: %w", scnt, rcnt, err)
		}
		for _, wc := range got {
			switch wc.ID {
			case toolSendID:
				scnt++
				pending &^= pSend
			case toolRecvID:
				if int(wc.ByteLen) != recvLen {
					return res, fmt.Errorf("toolpeer: pingpong: received %d bytes, want %d", wc.ByteLen, recvLen)
				}
				rcnt++
				pending &^= pRecv
			}
			if scnt < iters && pending == 0 {
				if err := send(); err != nil {
					return res, err
				}
				pending = pRecv | pSend
			}
		}
	}
	res.Elapsed = time.Since(t0)
	return res, nil
}
