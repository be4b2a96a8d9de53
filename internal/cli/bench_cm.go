package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/roce"
)

// bench -R: perftest's rdma_cm mode (cm/perftest_rdmacm.go has the exchange). The client
// connects a control queue pair to the server's rdma_cm port through the RDMA CM and runs
// perftest's exchange over it as SENDs; between the two handshakes of zero keys it connects the
// test queue pair through a second CM connection to the same port. Afterwards the client
// disconnects both (test, then control), as perftest's client does; the server waits for that.

// cmTestRetry is how long the client keeps asking for the test queue pair's connection while
// the server answers REJ invalid service ID (perftest's server listens again only after the
// handshake; perftest's client retries 10 times 100 ms apart, which a slow server outlasts: rxe
// under TCG on a loaded host). The run's budget bounds it too.
const cmTestRetry = 30 * time.Second

// cmControlWait is how long the client waits for an answer to the control connection's REQ
// (after --connect-timeout's retries).
const cmControlWait = 15 * time.Second

// cmDisconnectWait bounds the server's wait for the client's disconnects and each DREQ.
const cmDisconnectWait = 5 * time.Second

// checkBenchCM checks the flags -R runs with: one size by iterations, -q N for bandwidth tests
// only (perftest's latency tests run one queue pair), the same values given at both ends
// (nothing is agreed).
func checkBenchCM(cmd, test string, qps int, sweep bool, seconds int, mode string) error {
	switch {
	case qps != 1 && test == "lat":
		return usageErrorf(cmd, "-R lat runs one queue pair (--qps %d)", qps)
	case sweep, seconds != 0:
		return usageErrorf(cmd, "-R runs one size by iterations (not -a or -D)")
	case mode != cm.ModeRC:
		return usageErrorf(cmd, "-R: --mode %s needs xdproce's own exchange", mode)
	}
	return nil
}

// cmPeers are the test queue pairs' peers (--qps of them, in one protection domain: perftest's
// connections may pair its i-th queue pair with the j-th here, and its WRITEs carry the i-th
// key) for a run whose control connection goes to or comes from remote. Their GID is the local
// address the route to remote takes (or -x's).
func (b *bench) cmPeers(remote netip.Addr) (peers []*toolpeer.Peer, err error) {
	var local net.Addr = &net.TCPAddr{}
	if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote, 9))); err == nil {
		local = &net.TCPAddr{IP: c.LocalAddr().(*net.UDPAddr).IP}
		c.Close()
	}
	pd := b.dev.AllocPD()
	for range b.qps {
		p, err := b.cmPeer(local, pd)
		if err != nil {
			destroyPeers(peers)
			return nil, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

func destroyPeers(peers []*toolpeer.Peer) {
	for _, p := range peers {
		p.QP.Destroy() //nolint:errcheck // the run's result is reported
	}
}

// cmPeer is one test queue pair's peer.
func (b *bench) cmPeer(local net.Addr, pd *roce.PD) (*toolpeer.Peer, error) {
	p, err := b.peerIn(local, pd)
	if err != nil {
		return nil, err
	}
	p.PSN = 0 // the CM chooses the PSNs; the key message's is perftest's random one
	if b.test != cm.ReadBW && b.test != cm.AtomicBW {
		p.OutReads = 1 // as perftest announces for tests without READs or atomics
	}
	for i, g := range b.dev.GIDs() {
		if cm.GIDFromAddr(g) == p.GID {
			p.GIDIndex = uint32(i)
		}
	}
	return p, nil
}

// cmOptions are the CM options of the queue pairs: -m's path MTU and -x's GID, if given, and
// READ/atomic resources as perftest's rdma_conn_param has them: the CM's default (16) for read
// and atomic tests (perftest asks for its out_reads), none for the others.
func (b *bench) cmOptions() *roce.CMOptions {
	o := &roce.CMOptions{ExactResources: b.test != cm.ReadBW && b.test != cm.AtomicBW}
	if b.mtu != 0 || b.sgid.IsValid() {
		co := roce.DefaultConnectOptions()
		co.PathMTU, co.SGID = b.mtu, b.sgid
		o.Connect = &co
	}
	return o
}

func (b *bench) clientCM(ctx context.Context, host string, port int, retry time.Duration) ([]benchResult, error) {
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("-R: resolve %s: %v", host, err)
	}
	dst := netip.AddrPortFrom(ips[0].Unmap(), uint16(port))
	ctrl, err := toolpeer.NewControl(b.dev, b.dev.AllocPD())
	if err != nil {
		return nil, err
	}
	defer ctrl.Destroy()
	// Bounded: a host with nobody on QP1 never answers, and the CM would resend its REQ for
	// a minute.
	cctx, ccancel := context.WithTimeout(ctx, retry+cmControlWait)
	kc, err := dialCMRetry(cctx, b.dev, ctrl.QP, dst, b.cmOptions(), retry)
	ccancel()
	if err != nil {
		return nil, fmt.Errorf("-R: control connection: %w", err)
	}
	defer disconnectCM(kc)
	peers, err := b.cmPeers(dst.Addr())
	if err != nil {
		return nil, err
	}
	defer destroyPeers(peers)
	var kts []*roce.CMConn
	connect := func() error { // one CM connection per test queue pair, in order
		for _, p := range peers {
			kt, err := dialCMRetry(ctx, b.dev, p.QP, dst, b.cmOptions(), cmTestRetry)
			if err != nil {
				return err
			}
			kts = append(kts, kt)
		}
		return nil
	}
	bctx, cancel := withBudget(ctx, b.budgetBase, b.size, b.iters, b.qps)
	defer cancel()
	res, err := toolpeer.PerftestCMQPs(bctx, peers, ctrl, true, b.test, b.size, b.iters, int(b.pathMTU()), b.op, connect)
	err = budgetErr(bctx, err)
	for _, kt := range kts {
		disconnectCM(kt)
	}
	return b.stockResult(res, err, true)
}

func (b *bench) serverCM(ctx context.Context, port int) ([]benchResult, error) {
	l, err := b.dev.ListenCM(uint16(port), b.cmOptions())
	if err != nil {
		return nil, err
	}
	defer l.Close()
	ctrl, err := toolpeer.NewControl(b.dev, b.dev.AllocPD())
	if err != nil {
		return nil, err
	}
	defer ctrl.Destroy()
	fmt.Fprintf(b.env.Stderr, "bench %s: waiting for the client on rdma_cm port %d of %[3]s only (-R; %[3]s over %s, path MTU %d)\n",
		b.name, port, b.dev.Name(), b.dev.LinkName(), b.pathMTU().Bytes())
	req, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	kc, err := req.Accept(ctx, ctrl.QP, nil)
	if err != nil {
		return nil, fmt.Errorf("-R: control connection: %w", err)
	}
	peers, err := b.cmPeers(req.Remote.Addr())
	if err != nil {
		disconnectCM(kc)
		return nil, err
	}
	defer destroyPeers(peers)
	bctx, cancel := withBudget(ctx, b.budgetBase, b.size, b.iters, b.qps)
	defer cancel()
	var kts []*roce.CMConn
	connect := func() error { // the test queue pairs' connections, in the order they come
		for len(kts) < len(peers) {
			r, err := l.Accept(bctx)
			if err != nil {
				return err
			}
			if r.Remote.Addr() != req.Remote.Addr() { // another client's: this one is busy
				r.Reject(nil) //nolint:errcheck // the other client is told no either way
				continue
			}
			kt, err := r.Accept(bctx, peers[len(kts)].QP, nil)
			if err != nil {
				return err
			}
			kts = append(kts, kt)
		}
		return nil
	}
	res, err := toolpeer.PerftestCMQPs(bctx, peers, ctrl, false, b.test, b.size, b.iters, int(b.pathMTU()), b.op, connect)
	err = budgetErr(bctx, err)
	// perftest's client disconnects the test connections, then the control one: wait for it,
	// then disconnect what is left (nothing, usually).
	for _, k := range append(kts, kc) {
		if err == nil {
			select {
			case <-k.Done():
			case <-time.After(cmDisconnectWait):
			case <-ctx.Done():
			}
		}
		disconnectCM(k)
	}
	return b.stockResult(res, err, false)
}

// dialCMRetry connects q to dst through the RDMA CM, asking again 100 ms after each REJ
// invalid service ID (nothing listens yet) for up to retry.
func dialCMRetry(ctx context.Context, dev *roce.Device, q *roce.QP, dst netip.AddrPort, o *roce.CMOptions, retry time.Duration) (*roce.CMConn, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		k, err := dev.DialCM(ctx, q, dst, nil, o)
		var rej *roce.CMRejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != roce.CMRejInvalidServiceID {
			return k, err
		}
		if time.Since(start)+100*time.Millisecond > retry {
			return nil, fmt.Errorf("%w (%d attempts in %v: nothing listens on rdma_cm port %d there)", err, attempt, time.Since(start).Round(10*time.Millisecond), dst.Port())
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// disconnectCM disconnects k within cmDisconnectWait (nothing happens when the peer already
// did).
func disconnectCM(k *roce.CMConn) {
	ctx, cancel := context.WithTimeout(context.Background(), cmDisconnectWait)
	defer cancel()
	k.Disconnect(ctx) //nolint:errcheck // the run's result is what is reported
}
