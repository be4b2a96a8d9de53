package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/xdproce/xdproce/roce"
)

var ucmatoseCommand = &Command{
	Name:       "ucmatose",
	ShortUsage: "xdproce ucmatose --dev IF [-s SERVER] [-b ADDR] [-c CONNECTIONS] [-C COUNT] [-S SIZE] [-t TOS] [-p PORT] [-P tcp] [-m]",
	ShortHelp:  "exchange SENDs over RDMA CM connections, as librdmacm's ucmatose (cmatose) does",
	LongHelp: `Ucmatose is librdmacm's ucmatose on xdproce: -c RC connections set up by the
RDMA connection manager (REQ, REP, RTU on QP1, RDMA_PS_TCP port -p, 7471 by
default), so the peer may be ucmatose itself over rxe or another xdproce
ucmatose. Without -s it is the server: it accepts -c connections, sends -C
SENDs of -S bytes on each, waits for -C back, and disconnects. With -s it is
the client: it connects -c times, waits for the -C SENDs on each, sends -C
back and waits for the server's disconnect. Both print cmatose's progress
lines and "return status N" (0 on success; a refused or unanswered
connection prints "cmatose: event: RDMA_CM_EVENT_REJECTED, error: N" with
the REJ's reason, or RDMA_CM_EVENT_UNREACHABLE with -110, first).

-b is the address to listen on or connect from (one of --dev's); -t sets the
connections' traffic class; -P tcp names RDMA_PS_TCP, the only port space
served; -m prints cmatose's migration line (there is one event channel).
Unlike cmatose, the server prints its first line once it listens. Up to 64
connections are set up (and torn down) at once, all in one protection
domain. --stats prints to stderr how fast the connections were set up, the
resident set and Go heap before and with all of them up, and what the CM
agent and the device hold after the teardown. Nothing is authenticated: a
test tool for networks you control.

EXAMPLES
  sudo xdproce ucmatose --dev eth1
  sudo xdproce ucmatose --dev eth1 -s 198.51.100.2 -c 4 -C 10 -S 100
  sudo xdproce ucmatose --dev eth1 -s 198.51.100.2 -c 10000 --stats`,
	Setup: setupUcmatose,
}

func setupUcmatose(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	server := fs.String("s", "", "the server's `address` (makes this the client)")
	bind := fs.String("b", "", "`address` to listen on or connect from (one of --dev's)")
	conns := fs.Int("c", 1, "`connections`")
	count := fs.Int("C", 10, "SENDs each way on each connection (`count`)")
	size := fs.Int("S", 100, "SEND `bytes`")
	tos := fs.String("t", "", "traffic class (`TOS`) of the connections")
	port := fs.Int("p", 7471, "rdma_cm `port`")
	psName := fs.String("P", "tcp", "port `space` (only tcp)")
	format := fs.String("f", "ip", "address `format` (only ip)")
	migrate := fs.Bool("m", false, "print cmatose's event channel migration line")
	timeout := fs.Duration("connect-timeout", 2*time.Minute, "how long the client waits for each connection")
	stats := fs.Bool("stats", false, "print the set-up rate, memory and what is left afterwards to stderr")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce ucmatose"
		c := &cmatose{out: env.Stdout, conns: *conns, count: *count, size: *size, migrate: *migrate}
		if *stats {
			c.stats = &cmatoseStats{w: env.Stderr}
		}
		if *size == 0 {
			c.count = 0 // as cmatose: no message size, no messages
		}
		switch {
		case len(args) != 0:
			return usageErrorf(cmd, "unexpected arguments %q", args)
		case *conns < 1:
			return usageErrorf(cmd, "-c %d: want 1 or more connections", *conns)
		case *count < 0 || *size < 0:
			return usageErrorf(cmd, "-C %d -S %d: want counts and sizes of 0 or more", *count, *size)
		case *port <= 0 || *port > 65535:
			return usageErrorf(cmd, "-p %d: want a port 1 to 65535", *port)
		case !strings.EqualFold(*psName, "tcp"):
			return usageErrorf(cmd, "-P %s: only tcp (RDMA_PS_TCP) is served", *psName)
		case !strings.EqualFold(*format, "ip"):
			return usageErrorf(cmd, "-f %s: only ip (numeric addresses)", *format)
		}
		co := roce.DefaultConnectOptions()
		co.RetryCnt = 5 // cmatose's retry_count
		tv, set, err := cmToolTOS(cmd, *tos)
		if err != nil {
			return err
		}
		if set {
			co.TOS = tv
		}
		c.opts = &roce.CMOptions{ResponderResources: 1, InitiatorDepth: 1, Connect: &co}
		dst, src, err := cmToolAddrs(cmd, *server, *bind)
		if err != nil {
			return err
		}
		return cmToolRun(ctx, env, cmd, "ucmatose", &df, src, c.out, func(dev *roce.Device) (int, error) {
			c.dev = dev
			if dst.IsValid() {
				return c.client(ctx, netip.AddrPortFrom(dst, uint16(*port)), *timeout)
			}
			return c.serve(ctx, uint16(*port))
		}, c.destroy)
	}
}

// cmatose is one end of a run: a node (RC queue pair, send and receive
// CQs, one message buffer) per connection, all in one protection domain.
type cmatose struct {
	out                io.Writer
	dev                *roce.Device
	pd                 *roce.PD
	opts               *roce.CMOptions
	conns, count, size int
	migrate            bool
	nodes              []*cmNode
	stats              *cmatoseStats // --stats: nil without
}

type cmNode struct {
	scq, rcq *roce.CQ
	qp       *roce.QP
	mr       *roce.MR
	k        *roce.CMConn
}

// cmatoseWindow is how many connections are being set up or torn down at
// once (cmatose starts all of them at once; QP1 has 64 send slots and a
// listener's backlog is 1024).
const cmatoseWindow = 64

// node makes a connection's queue pair in INIT with its receives posted
// (as cmatose posts them before rdma_connect or rdma_accept).
func (c *cmatose) node() (*cmNode, error) {
	n := &cmNode{}
	c.nodes = append(c.nodes, n)
	if c.pd == nil {
		c.pd = c.dev.AllocPD()
	}
	depth := max(c.count, 1)
	var err error
	if n.scq, err = c.dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if n.rcq, err = c.dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if n.mr, err = c.pd.RegMR(make([]byte, max(c.size, 1)), roce.LocalWrite); err != nil {
		return nil, err
	}
	if n.qp, err = c.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: n.scq, RecvCQ: n.rcq, MaxSendWR: depth, MaxRecvWR: depth, MaxSGE: 1}); err != nil {
		return nil, err
	}
	if err := n.qp.Modify(&roce.Attr{State: roce.StateInit, Access: roce.LocalWrite}, roce.AttrState|roce.AttrAccessFlags); err != nil {
		return nil, err
	}
	for i := range c.count {
		if err := n.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: n.sge(c.size)}); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (n *cmNode) sge(length int) []roce.SGE {
	return []roce.SGE{{Addr: n.mr.Addr(), Length: uint32(length), LKey: n.mr.LKey()}}
}

// cmatoseSendNodes is how many nodes' SENDs are outstanding at once.
// cmatose posts every node's at once; thousands of connections doing so
// here sent a burst (100,000 SENDs for -c 10000) that overran the peer's
// receive ring, and the go-back-N resends of every queue pair, timed
// alike, overran it again until their retries ran out.
const cmatoseSendNodes = 128

// sends posts count signaled SENDs on every node (sq_sig_all) and waits
// for their completions, cmatoseSendNodes nodes at a time.
func (c *cmatose) sends(ctx context.Context) error {
	for lo := 0; lo < len(c.nodes); lo += cmatoseSendNodes {
		nodes := c.nodes[lo:min(lo+cmatoseSendNodes, len(c.nodes))]
		for _, n := range nodes {
			for i := range c.count {
				if err := n.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.Signaled, SGL: n.sge(c.size)}); err != nil {
					return err
				}
			}
		}
		if err := c.poll(ctx, nodes, false); err != nil {
			return err
		}
	}
	return nil
}

// poll waits for count successful completions on each node's send or
// receive CQ.
func (c *cmatose) poll(ctx context.Context, nodes []*cmNode, recv bool) error {
	wcs := make([]roce.WC, 8)
	for _, n := range nodes {
		cq := n.scq
		if recv {
			cq = n.rcq
		}
		for done := 0; done < c.count; {
			k, err := cq.Wait(ctx, wcs)
			if err != nil {
				return err
			}
			for _, wc := range wcs[:k] {
				if wc.Status != roce.WCSuccess {
					return fmt.Errorf("queue pair %#x: %v completed with %v", n.qp.QPN(), wc.Opcode, wc.Status)
				}
			}
			done += k
		}
	}
	return nil
}

func (c *cmatose) migrated() {
	if c.migrate {
		fmt.Fprintln(c.out, "migrating to new event channel")
	}
}

// serve accepts conns connections (up to cmatoseWindow exchanges at
// once), sends, receives and disconnects.
func (c *cmatose) serve(ctx context.Context, port uint16) (int, error) {
	l, err := c.dev.ListenCM(port, c.opts)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	fmt.Fprintln(c.out, "cmatose: starting server")
	c.stats.start()
	err = inWindow(ctx, c.conns, func(ctx context.Context, i int) (func(context.Context) error, error) {
		r, err := l.Accept(ctx)
		if err != nil {
			return nil, err
		}
		n, err := c.node()
		if err != nil {
			fmt.Fprintln(c.out, "cmatose: failing connection request")
			r.Reject(nil) //nolint:errcheck // the error reported is err
			return nil, err
		}
		return func(ctx context.Context) (err error) {
			n.k, err = r.Accept(ctx, n.qp, nil)
			return err
		}, nil
	})
	if err != nil {
		return 0, err
	}
	c.stats.established()
	if c.count > 0 {
		fmt.Fprintln(c.out, "initiating data transfers")
		fmt.Fprintln(c.out, "completing sends")
		if err := c.sends(ctx); err != nil {
			return 0, err
		}
		fmt.Fprintln(c.out, "receiving data transfers")
		if err := c.poll(ctx, c.nodes, true); err != nil {
			return 0, err
		}
		fmt.Fprintln(c.out, "data transfers complete")
	}
	c.stats.transferred()
	c.migrated()
	fmt.Fprintln(c.out, "cmatose: disconnecting")
	if err := inWindow(ctx, len(c.nodes), func(_ context.Context, i int) (func(context.Context) error, error) {
		return c.nodes[i].k.Disconnect, nil
	}); err != nil {
		return 0, err
	}
	fmt.Fprintln(c.out, "disconnected")
	return 0, nil
}

// client connects conns times (up to cmatoseWindow at once), receives,
// replies and waits for the server's disconnects. The first REJ or timeout
// ends the run with cmatose's line and status.
func (c *cmatose) client(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (int, error) {
	fmt.Fprintln(c.out, "cmatose: starting client")
	fmt.Fprintln(c.out, "cmatose: connecting")
	c.stats.start()
	err := inWindow(ctx, c.conns, func(context.Context, int) (func(context.Context) error, error) {
		n, err := c.node()
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (err error) {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			n.k, err = c.dev.DialCM(cctx, n.qp, dst, nil, c.opts)
			if err != nil && ctx.Err() == nil && cctx.Err() != nil {
				err = fmt.Errorf("%w (--connect-timeout %v)", roce.ErrCMTimeout, timeout)
			}
			return err
		}, nil
	})
	var rej *roce.CMRejectError
	switch {
	case errors.As(err, &rej):
		fmt.Fprintf(c.out, "cmatose: event: RDMA_CM_EVENT_REJECTED, error: %d\n", rej.Reason)
		return int(rej.Reason), nil
	case errors.Is(err, roce.ErrCMTimeout):
		fmt.Fprintln(c.out, "cmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: -110")
		return -110, nil // -ETIMEDOUT, as rdma_cm reports it
	case err != nil:
		return 0, err
	}
	c.stats.established()
	if c.count > 0 {
		fmt.Fprintln(c.out, "receiving data transfers")
		if err := c.poll(ctx, c.nodes, true); err != nil {
			return 0, err
		}
		fmt.Fprintln(c.out, "sending replies")
		if err := c.sends(ctx); err != nil {
			return 0, err
		}
		fmt.Fprintln(c.out, "data transfers complete")
	}
	c.stats.transferred()
	c.migrated()
	for _, n := range c.nodes { // the server disconnects once it has the replies
		select {
		case <-n.k.Done():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, nil
}

// destroy takes the nodes' queue pairs down and deregisters their
// buffers, up to cmatoseWindow at once (each destroy waits for an engine
// round to flush its work requests), then frees the protection domain (it
// fails if anything is left in it). A connection still up (a run that
// failed) is disconnected first, as the kernel's rdma_cm does for a
// process that exits, so the peer stops waiting.
func (c *cmatose) destroy() {
	inWindow(context.Background(), len(c.nodes), func(_ context.Context, i int) (func(context.Context) error, error) { //nolint:errcheck // no step fails
		return func(ctx context.Context) error {
			n := c.nodes[i]
			if n.k != nil {
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				n.k.Disconnect(ctx) //nolint:errcheck // best effort: nil once disconnected
				cancel()
			}
			if n.qp != nil {
				n.qp.Destroy() //nolint:errcheck // the run's result is reported
			}
			if n.mr != nil {
				n.mr.Deregister() //nolint:errcheck // Dealloc below says if it failed
			}
			return nil
		}, nil
	})
	var pdErr error
	if c.pd != nil {
		pdErr = c.pd.Dealloc()
	}
	c.nodes, c.pd = nil, nil
	c.stats.destroyed(c.dev, c.conns, pdErr)
}
