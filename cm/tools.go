package cm

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// ToolPeer is xdproce's end of a run against rdma-core's pingpong tools or perftest, over a
// connection already made (the client dialled the tool's port, or the server accepted the
// tool): one RC queue pair in RESET, the completion queue it sends and receives on, and a
// registered buffer. The runs do what the tools do, so the tools on the other side see a peer
// like themselves; package interop checks them against the real ones.
type ToolPeer struct {
	QP *roce.QP
	CQ *roce.CQ // the QP's send and receive CQ, used by nothing else during the run
	// MR is the buffer: at least 2×size bytes for pingpong (receive half, send half), size
	// for perftest (8 for atomics), with remote write, read and atomic access for perftest's
	// server side.
	MR  *roce.MR
	GID GID    // this side's GID (the one rdma-core's -g / perftest's -x would name)
	PSN uint32 // first PSN this side sends; 0 draws a random one
	// Connect are the attributes of the QP's connection (nil: roce.DefaultConnectOptions).
	Connect *roce.ConnectOptions
	// OutReads is what perftest's key message announces as the READ/atomic depth this side
	// accepts (0: 16, roce's default MaxDestRdAtomic).
	OutReads uint16
}

// PingpongResult is what a pingpong run did, printable as ibv_rc_pingpong prints it.
type PingpongResult struct {
	Local, Remote PingpongDest
	Size, Iters   int
	Elapsed       time.Duration // from the first send (client) or receive (server) to the last completion
}

// Lines are ibv_rc_pingpong's output lines for the run: the two address lines, then bytes and
// iterations with their rates.
func (r PingpongResult) Lines() []string {
	usec := float64(r.Elapsed.Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(r.Size) * int64(r.Iters) * 2
	return []string{
		"  local address:  " + r.Local.String(),
		"  remote address: " + r.Remote.String(),
		fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec", bytes, usec/1e6, float64(bytes)*8/usec),
		fmt.Sprintf("%d iters in %.2f seconds = %.2f usec/iter", r.Iters, usec/1e6, usec/float64(r.Iters)),
	}
}

const (
	toolRecvID = 1
	toolSendID = 2
)

func (p *ToolPeer) psn() uint32 {
	if p.PSN == 0 {
		p.PSN = rand.Uint32()&0xffffff | 1
	}
	return p.PSN & 0xffffff
}

func (p *ToolPeer) connect(qpn, psn uint32, gid GID) error {
	return p.QP.Connect(p.psn(), roce.Endpoint{QPN: qpn, PSN: psn, GID: netip.AddrFrom16(gid)}, p.Connect)
}

func (p *ToolPeer) sge(off, n int) []roce.SGE {
	return []roce.SGE{{Addr: p.MR.Addr() + uint64(off), Length: uint32(n), LKey: p.MR.LKey()}}
}

func (p *ToolPeer) postRecvs(n, off, size int) error {
	for range n {
		if err := p.QP.PostRecv(roce.RecvWR{ID: toolRecvID, SGL: p.sge(off, size)}); err != nil {
			return fmt.Errorf("cm: post receive: %w", err)
		}
	}
	return nil
}

func (p *ToolPeer) send(off, size int) error {
	if err := p.QP.PostSend(roce.SendWR{ID: toolSendID, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: p.sge(off, size)}); err != nil {
		return fmt.Errorf("cm: post send: %w", err)
	}
	return nil
}

// poll waits for completions; an error status is an error naming the work request.
func (p *ToolPeer) poll(ctx context.Context, wcs []roce.WC) ([]roce.WC, error) {
	n, err := p.CQ.Wait(ctx, wcs)
	if err != nil {
		return nil, fmt.Errorf("cm: wait for completions: %w", err)
	}
	for _, wc := range wcs[:n] {
		if wc.Status != qp.WCSuccess {
			return nil, fmt.Errorf("cm: work request %d (%v): %v", wc.ID, wc.Opcode, wc.Status)
		}
	}
	return wcs[:n], nil
}

func (p *ToolPeer) check(need int) error {
	if p.QP == nil || p.CQ == nil || p.MR == nil {
		return fmt.Errorf("cm: tool peer needs QP, CQ and MR")
	}
	if p.MR.Len() < need {
		return fmt.Errorf("cm: tool peer buffer of %d bytes, the run needs %d", p.MR.Len(), need)
	}
	return nil
}

// Pingpong runs ibv_rc_pingpong's exchange and its loop on conn: the client sends first, and
// each side sends its next message of size bytes once its previous send and a receive
// completed, iters messages each way. client is true when this side dialled.
func (p *ToolPeer) Pingpong(ctx context.Context, conn net.Conn, client bool, size, iters int) (PingpongResult, error) {
	res := PingpongResult{Size: size, Iters: iters}
	if size <= 0 || iters <= 0 {
		return res, fmt.Errorf("cm: pingpong: size %d and iterations %d must be positive", size, iters)
	}
	if err := p.check(2 * size); err != nil {
		return res, err
	}
	res.Local = PingpongDest{QPN: p.QP.QPN(), PSN: p.psn(), GID: p.GID}
	ready := func(r PingpongDest) error {
		if err := p.connect(r.QPN, r.PSN, r.GID); err != nil {
			return err
		}
		return p.postRecvs(iters, 0, size)
	}
	var err error
	if client {
		if res.Remote, err = DialPingpong(ctx, conn, res.Local); err != nil {
			return res, err
		}
		if err := ready(res.Remote); err != nil {
			return res, err
		}
	} else if res.Remote, err = ServePingpong(ctx, conn, res.Local, ready); err != nil {
		return res, err
	}

	const pRecv, pSend = 1, 2
	pending := pRecv
	scnt, rcnt := 0, 0
	t0 := time.Now()
	if client {
		if err := p.send(size, size); err != nil {
			return res, err
		}
		pending |= pSend
	}
	wcs := make([]roce.WC, 16)
	for scnt < iters || rcnt < iters {
		got, err := p.poll(ctx, wcs)
		if err != nil {
			return res, fmt.Errorf("cm: pingpong after %d sends and %d receives: %w", scnt, rcnt, err)
		}
		for _, wc := range got {
			switch wc.ID {
			case toolSendID:
				scnt++
				pending &^= pSend
			case toolRecvID:
				if int(wc.ByteLen) != size {
					return res, fmt.Errorf("cm: pingpong: received %d bytes, want %d", wc.ByteLen, size)
				}
				rcnt++
				pending &^= pRecv
			}
			if scnt < iters && pending == 0 {
				if err := p.send(size, size); err != nil {
					return res, err
				}
				pending = pRecv | pSend
			}
		}
	}
	res.Elapsed = time.Since(t0)
	return res, nil
}

// AtomicOp is ib_atomic_bw's -A.
type AtomicOp string

const (
	FetchAndAdd AtomicOp = "FETCH_AND_ADD"
	CmpAndSwap  AtomicOp = "CMP_AND_SWAP"
)

// PerftestResult is what a perftest run did.
type PerftestResult struct {
	Local, Remote PerftestDest
	MTU           int            // ibverbs MTU enum both sides use
	Report        PerftestReport // this side's measurement (a client's; zero for a server)
	PeerReport    PerftestReport // what the peer sent (the client's, on a server)
	Elapsed       time.Duration
	// Latencies of ib_send_lat on the client: half of each round trip, as perftest reports.
	Latencies []time.Duration
}

// Lines are the lines perftest prints for the run: both address lines with their GIDs, the
// result header and row (bandwidth tests: bytes, iterations, peak and average MB/s, Mpps;
// latency: bytes, iterations, min, max, typical, average, stdev, 99% and 99.9% in µs). A
// server's row shows the client's report, as perftest's server does.
func (r PerftestResult) Lines(test PerftestTest) []string {
	addr := func(side string, d PerftestDest) []string {
		l := fmt.Sprintf(" %s address: LID %04x QPN %s PSN %s", side, d.LID, altHex(uint64(d.QPN), 6), altHex(uint64(d.PSN), 6))
		if test == ReadBW {
			l += " OUT " + altHex(uint64(d.OutReads), 4)
		}
		if test == ReadBW || test == WriteBW {
			l += fmt.Sprintf(" RKey %s VAddr %s", altHex(uint64(d.RKey), 8), altHex(d.VAddr, 16))
		}
		g := " GID: "
		for i, b := range d.GID {
			if i > 0 {
				g += ":"
			}
			g += fmt.Sprintf("%02d", b)
		}
		return []string{l, g}
	}
	lines := append(addr("local", r.Local), addr("remote", r.Remote)...)
	if test == SendLat {
		lines = append(lines, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
		if len(r.Latencies) > 0 {
			st := latencyStats(r.Latencies)
			lines = append(lines, fmt.Sprintf(" %-7d %-7d    %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f",
				r.Report.Size, len(r.Latencies), st[0], st[1], st[2], st[3], st[4], st[5], st[6]))
		}
		return lines
	}
	rep := r.Report
	if rep.Iters == 0 {
		rep = r.PeerReport
	}
	lines = append(lines, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	if rep.Iters > 0 {
		lines = append(lines, fmt.Sprintf(" %-7d    %-7d          %-7.2f            %-7.2f\t\t   %-7.6f", rep.Size, rep.Iters, rep.BWPeak, rep.BWAvg, rep.MsgRate))
	}
	return lines
}

// latencyStats gives min, max, median, mean, standard deviation, 99th and 99.9th percentile
// in microseconds.
func latencyStats(d []time.Duration) [7]float64 {
	us := make([]float64, len(d))
	var sum float64
	for i, x := range d {
		us[i] = float64(x) / 1e3
		sum += us[i]
	}
	slices.Sort(us)
	n := float64(len(us))
	mean := sum / n
	var v float64
	for _, x := range us {
		v += (x - mean) * (x - mean)
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*n)) - 1
		return us[max(0, min(i, len(us)-1))]
	}
	return [7]float64{us[0], us[len(us)-1], us[len(us)/2], mean, math.Sqrt(v / n), pct(0.99), pct(0.999)}
}

// altHex formats v as C's "%#0Nx" does (the width counts the "0x"; 0 prints as "0").
func altHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*d", width, 0)
	}
	s := fmt.Sprintf("%x", v)
	for len(s)+2 < width {
		s = "0" + s
	}
	return "0x" + s
}

// Perftest runs one perftest test on conn, as the perftest tool of that name would: client
// true dials (and drives the data: WRITEs, READs, SENDs, atomics, or the first SEND of the
// latency test); the server side exposes its buffer (write, read, atomic), receives (send) or
// answers each SEND with one (lat). mtu is this side's active MTU as the ibverbs enum
// (3 = 1024). For the atomic test size is 8 and op chooses the operation.
func (p *ToolPeer) Perftest(ctx context.Context, conn net.Conn, client bool, test PerftestTest, size, iters, mtu int, op AtomicOp) (PerftestResult, error) {
	var res PerftestResult
	if test == AtomicBW {
		size = 8
		if op == "" {
			op = FetchAndAdd
		}
		if op != FetchAndAdd && op != CmpAndSwap {
			return res, fmt.Errorf("cm: perftest: atomic operation %q (want FETCH_AND_ADD or CMP_AND_SWAP)", op)
		}
	}
	if size <= 0 || iters <= 0 {
		return res, fmt.Errorf("cm: perftest: size %d and iterations %d must be positive", size, iters)
	}
	need := size
	if test == SendLat {
		need = 2 * size
	}
	if err := p.check(need); err != nil {
		return res, err
	}
	if p.MR.Addr()%8 != 0 && test == AtomicBW {
		return res, fmt.Errorf("cm: perftest: atomics need an 8-byte aligned buffer")
	}
	outReads := p.OutReads
	if outReads == 0 {
		outReads = 16
	}
	res.Local = PerftestDest{OutReads: outReads, QPN: p.QP.QPN(), PSN: p.psn(), RKey: p.MR.RKey(), VAddr: p.MR.Addr(), GID: p.GID}
	pc := NewPerftestConn(conn, client)
	var err error
	res.Remote, res.MTU, err = pc.Setup(ctx, test, PerftestSetup{MTU: mtu, Local: res.Local,
		Connect: func(r PerftestDest, _ int) error { return p.connect(r.QPN, r.PSN, r.GID) },
		Ready: func() error {
			if test == SendLat || (test == SendBW && !client) {
				return p.postRecvs(iters, 0, size)
			}
			return nil
		}})
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if client {
		err = p.perftestClient(ctx, test, res.Remote, size, iters, op, &res.Latencies)
	} else {
		err = p.perftestServer(ctx, test, size, iters)
	}
	res.Elapsed = time.Since(t0)
	if err != nil {
		conn.Close()
		return res, err
	}
	if client {
		sec := res.Elapsed.Seconds()
		mbs := float64(size) * float64(iters) / sec / (1 << 20) // perftest's MB is 2^20 bytes
		res.Report = PerftestReport{Size: uint64(size), Iters: uint64(iters), BWPeak: mbs, BWAvg: mbs, MsgRate: float64(iters) / sec / 1e6}
	}
	res.PeerReport, err = pc.Finish(ctx, test, res.Local, res.Report)
	return res, err
}

func (p *ToolPeer) perftestClient(ctx context.Context, test PerftestTest, remote PerftestDest, size, iters int, op AtomicOp, lat *[]time.Duration) error {
	wcs := make([]roce.WC, 64)
	if test == SendLat {
		for i := range iters {
			t0 := time.Now()
			if err := p.send(size, size); err != nil {
				return err
			}
			for sent, recvd := false, false; !sent || !recvd; {
				got, err := p.poll(ctx, wcs)
				if err != nil {
					return fmt.Errorf("cm: %v iteration %d: %w", test, i, err)
				}
				for _, wc := range got {
					sent = sent || wc.ID == toolSendID
					recvd = recvd || wc.ID == toolRecvID
				}
			}
			*lat = append(*lat, time.Since(t0)/2)
		}
		return nil
	}
	window := 64
	if test == ReadBW || test == AtomicBW {
		window = int(remote.OutReads) // the peer's responder resources bound what is outstanding anyway
		if window <= 0 || window > 64 {
			window = 64
		}
	}
	posted, done := 0, 0
	for done < iters {
		for posted < iters && posted-done < window {
			wr := roce.SendWR{ID: uint64(posted), Flags: qp.Signaled, SGL: p.sge(0, size), RemoteAddr: remote.VAddr, RKey: remote.RKey}
			switch test {
			case WriteBW:
				wr.Opcode = qp.WRRDMAWrite
			case ReadBW:
				wr.Opcode = qp.WRRDMARead
			case SendBW:
				wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRSend, 0, 0
			case AtomicBW:
				if op == CmpAndSwap {
					wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpSwp, uint64(posted), uint64(posted)+1
				} else {
					wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAdd, 1
				}
			}
			if err := p.QP.PostSend(wr); err != nil {
				return fmt.Errorf("cm: %v: post: %w", test, err)
			}
			posted++
		}
		got, err := p.poll(ctx, wcs)
		if err != nil {
			return fmt.Errorf("cm: %v after %d of %d completions: %w", test, done, iters, err)
		}
		done += len(got)
	}
	return nil
}

func (p *ToolPeer) perftestServer(ctx context.Context, test PerftestTest, size, iters int) error {
	wcs := make([]roce.WC, 64)
	switch test {
	case SendBW:
		for got := 0; got < iters; {
			c, err := p.poll(ctx, wcs)
			if err != nil {
				return fmt.Errorf("cm: %v after %d of %d receives: %w", test, got, iters, err)
			}
			got += len(c)
		}
	case SendLat:
		for i := range iters {
			for recvd := false; !recvd; {
				c, err := p.poll(ctx, wcs)
				if err != nil {
					return fmt.Errorf("cm: %v iteration %d: %w", test, i, err)
				}
				for _, wc := range c {
					recvd = recvd || wc.ID == toolRecvID
				}
			}
			if err := p.send(size, size); err != nil {
				return err
			}
		}
	}
	// WRITE, READ and atomics: the client does the work; the closing handshake waits for it.
	return nil
}
