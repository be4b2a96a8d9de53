package toolpeer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
)

// AtomicOp is ib_atomic_bw's -A.
type AtomicOp string

const (
	FetchAndAdd AtomicOp = "FETCH_AND_ADD"
	CmpAndSwap  AtomicOp = "CMP_AND_SWAP"
)

// PerftestResult is what a perftest run did.
type PerftestResult struct {
	Local, Remote cm.PerftestDest
	// MoreLocal and MoreRemote are the keys of queue pairs 2 to N of a run with perftest's -q N.
	MoreLocal, MoreRemote []cm.PerftestDest
	MTU                   int               // ibverbs MTU enum both sides use
	Report                cm.PerftestReport // this side's measurement (a client's; zero for a server)
	PeerReport            cm.PerftestReport // what the peer sent (the client's, on a server)
	Elapsed               time.Duration
	// Latencies of ib_send_lat on the client: half of each round trip, as perftest reports.
	Latencies []time.Duration
}

// Lines are the lines perftest prints for the run: both address lines with their GIDs, the
// result header and row (bandwidth tests: bytes, iterations, peak and average MB/s, Mpps;
// latency: bytes, iterations, min, max, typical, average, stdev, 99% and 99.9% in µs). A
// server's row shows the client's report, as perftest's server does.
func (r PerftestResult) Lines(test cm.PerftestTest) []string {
	addr := func(side string, d cm.PerftestDest) []string {
		l := fmt.Sprintf(" %s address: LID %04x QPN %s PSN %s", side, d.LID, altHex(uint64(d.QPN), 6), altHex(uint64(d.PSN), 6))
		if test == cm.ReadBW {
			l += " OUT " + altHex(uint64(d.OutReads), 4)
		}
		if test == cm.ReadBW || test == cm.WriteBW {
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
	var lines []string
	for _, d := range append([]cm.PerftestDest{r.Local}, r.MoreLocal...) {
		lines = append(lines, addr("local", d)...)
	}
	for _, d := range append([]cm.PerftestDest{r.Remote}, r.MoreRemote...) {
		lines = append(lines, addr("remote", d)...)
	}
	if test == cm.SendLat {
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
func (p *Peer) Perftest(ctx context.Context, conn net.Conn, client bool, test cm.PerftestTest, size, iters, mtu int, op AtomicOp) (PerftestResult, error) {
	pc := cm.NewPerftestConn(conn, client)
	connect := func(r cm.PerftestDest, _ int) error { return p.connect(r.QPN, r.PSN, r.GID) }
	return p.perftest(ctx, pc, test, size, iters, mtu, op, func(s *cm.PerftestSetup) { s.Connect = connect }, func() { conn.Close() })
}

// PerftestCM runs the test as perftest's rdma_cm mode (-R) does: the exchange goes over ctrl,
// the control queue pair the RDMA CM connected, and connect (called between the two
// handshakes of zero keys) connects p.QP through the RDMA CM (the client dials, the server
// accepts). The caller disconnects both afterwards.
func (p *Peer) PerftestCM(ctx context.Context, ctrl cm.PerftestMessages, client bool, test cm.PerftestTest, size, iters, mtu int, op AtomicOp, connect func() error) (PerftestResult, error) {
	return PerftestCMQPs(ctx, []*Peer{p}, ctrl, client, test, size, iters, mtu, op, connect)
}

// PerftestCMQPs is PerftestCM with perftest's -q N: peers are the N test queue pairs (connect
// connects all of them), each runs iters operations at once with the others (bandwidth tests
// only), and the report counts all of them.
func PerftestCMQPs(ctx context.Context, peers []*Peer, ctrl cm.PerftestMessages, client bool, test cm.PerftestTest, size, iters, mtu int, op AtomicOp, connect func() error) (PerftestResult, error) {
	pc := cm.NewPerftestCMConn(ctrl, client)
	return perftest(ctx, peers, pc, test, size, iters, mtu, op, func(s *cm.PerftestSetup) { s.CMConnect = connect }, func() {})
}

func (p *Peer) perftest(ctx context.Context, pc *cm.PerftestConn, test cm.PerftestTest, size, iters, mtu int, op AtomicOp,
	connect func(*cm.PerftestSetup), abort func()) (PerftestResult, error) {
	return perftest(ctx, []*Peer{p}, pc, test, size, iters, mtu, op, connect, abort)
}

// perftest runs the test over pc on peers (one per queue pair); connect puts the step that
// connects the queue pairs into the setup, abort ends the exchange after a failed data phase.
func perftest(ctx context.Context, peers []*Peer, pc *cm.PerftestConn, test cm.PerftestTest, size, iters, mtu int, op AtomicOp,
	connect func(*cm.PerftestSetup), abort func()) (PerftestResult, error) {
	var res PerftestResult
	p := peers[0]
	if len(peers) > 1 && test == cm.SendLat {
		return res, fmt.Errorf("toolpeer: perftest: %v runs one queue pair (%d given)", test, len(peers))
	}
	if test == cm.AtomicBW {
		size = 8
		if op == "" {
			op = FetchAndAdd
		}
		if op != FetchAndAdd && op != CmpAndSwap {
			return res, fmt.Errorf("toolpeer: perftest: atomic operation %q (want FETCH_AND_ADD or CMP_AND_SWAP)", op)
		}
	}
	if size <= 0 || iters <= 0 {
		return res, fmt.Errorf("toolpeer: perftest: size %d and iterations %d must be positive", size, iters)
	}
	need := size
	if test == cm.SendLat {
		need = 2 * size
	}
	locals := make([]cm.PerftestDest, len(peers))
	for i, p := range peers {
		if err := p.check(need); err != nil {
			return res, err
		}
		if p.MR.Addr()%8 != 0 && test == cm.AtomicBW {
			return res, fmt.Errorf("toolpeer: perftest: atomics need an 8-byte aligned buffer")
		}
		outReads := p.OutReads
		if outReads == 0 {
			outReads = 16
		}
		locals[i] = cm.PerftestDest{OutReads: outReads, QPN: p.QP.QPN(), PSN: p.psn(), RKey: p.MR.RKey(), VAddr: p.MR.Addr(), GID: p.GID, GIDIndex: p.GIDIndex}
	}
	res.Local, res.MoreLocal = locals[0], locals[1:]
	setup := cm.PerftestSetup{MTU: mtu, Local: res.Local, More: res.MoreLocal,
		Ready: func() error {
			for _, p := range peers {
				if test == cm.SendLat || (test == cm.SendBW && !pc.Client) {
					if err := p.postRecvs(iters, 0, size); err != nil {
						return err
					}
				}
			}
			return nil
		}}
	connect(&setup)
	remotes, mtu, err := pc.SetupQPs(ctx, test, setup)
	if err != nil {
		return res, err
	}
	res.Remote, res.MoreRemote, res.MTU = remotes[0], remotes[1:], mtu
	t0 := time.Now()
	if len(peers) == 1 && pc.Client {
		err = p.perftestClient(ctx, test, res.Remote, size, iters, op, &res.Latencies)
	} else {
		err = eachPeer(peers, func(i int, p *Peer) error {
			if pc.Client {
				return p.perftestClient(ctx, test, remotes[i], size, iters, op, nil)
			}
			return p.perftestServer(ctx, test, size, iters)
		})
	}
	res.Elapsed = time.Since(t0)
	if err != nil {
		abort()
		return res, err
	}
	if pc.Client {
		sec, n := res.Elapsed.Seconds(), float64(len(peers))
		mbs := n * float64(size) * float64(iters) / sec / (1 << 20) // perftest's MB is 2^20 bytes
		// perftest reports the iterations of all queue pairs (iters × -q).
		res.Report = cm.PerftestReport{Size: uint64(size), Iters: uint64(iters * len(peers)), BWPeak: mbs, BWAvg: mbs, MsgRate: n * float64(iters) / sec / 1e6}
	}
	res.PeerReport, err = pc.Finish(ctx, test, res.Local, res.Report)
	return res, err
}

func (p *Peer) perftestClient(ctx context.Context, test cm.PerftestTest, remote cm.PerftestDest, size, iters int, op AtomicOp, lat *[]time.Duration) error {
	wcs := make([]roce.WC, 64)
	if test == cm.SendLat {
		for i := range iters {
			t0 := time.Now()
			if err := p.send(size, size); err != nil {
				return err
			}
			for sent, recvd := false, false; !sent || !recvd; {
				got, err := p.poll(ctx, wcs)
				if err != nil {
					return fmt.Errorf("toolpeer: %v iteration %d: %w", test, i, err)
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
	if test == cm.ReadBW || test == cm.AtomicBW {
		window = int(remote.OutReads) // the peer's responder resources bound what is outstanding anyway
		if window <= 0 || window > 64 {
			window = 64
		}
	}
	posted, done := 0, 0
	for done < iters {
		for posted < iters && posted-done < window {
			wr := roce.SendWR{ID: uint64(posted), Flags: roce.Signaled, SGL: p.sge(0, size), RemoteAddr: remote.VAddr, RKey: remote.RKey}
			switch test {
			case cm.WriteBW:
				wr.Opcode = roce.WRRDMAWrite
			case cm.ReadBW:
				wr.Opcode = roce.WRRDMARead
			case cm.SendBW:
				wr.Opcode, wr.RemoteAddr, wr.RKey = roce.WRSend, 0, 0
			case cm.AtomicBW:
				if op == CmpAndSwap {
					wr.Opcode, wr.CompareAdd, wr.Swap = roce.WRAtomicCmpSwp, uint64(posted), uint64(posted)+1
				} else {
					wr.Opcode, wr.CompareAdd = roce.WRAtomicFetchAdd, 1
				}
			}
			if err := p.QP.PostSend(wr); err != nil {
				return fmt.Errorf("toolpeer: %v: post: %w", test, err)
			}
			posted++
		}
		got, err := p.poll(ctx, wcs)
		if err != nil {
			return fmt.Errorf("toolpeer: %v after %d of %d completions: %w", test, done, iters, err)
		}
		done += len(got)
	}
	return nil
}

func (p *Peer) perftestServer(ctx context.Context, test cm.PerftestTest, size, iters int) error {
	wcs := make([]roce.WC, 64)
	switch test {
	case cm.SendBW:
		for got := 0; got < iters; {
			c, err := p.poll(ctx, wcs)
			if err != nil {
				return fmt.Errorf("toolpeer: %v after %d of %d receives: %w", test, got, iters, err)
			}
			got += len(c)
		}
	case cm.SendLat:
		for i := range iters {
			for recvd := false; !recvd; {
				c, err := p.poll(ctx, wcs)
				if err != nil {
					return fmt.Errorf("toolpeer: %v iteration %d: %w", test, i, err)
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

// eachPeer runs f on every peer at once and returns the first error.
func eachPeer(peers []*Peer, f func(i int, p *Peer) error) error {
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() { errs[i] = f(i, p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
