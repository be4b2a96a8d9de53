package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/roce"
)

var udaddyCommand = &Command{
	Name:       "udaddy",
	ShortUsage: "xdproce udaddy --dev IF [-s SERVER] [-b ADDR] [-c CONNECTIONS] [-C COUNT] [-S SIZE] [-t TOS] [-P udp]",
	ShortHelp:  "exchange UD datagrams with a peer found through the RDMA CM (SIDR), as librdmacm's udaddy does",
	LongHelp: `Udaddy is librdmacm's udaddy on xdproce: UD queue pairs found through the RDMA
connection manager's service ID resolution (SIDR_REQ and SIDR_REP on QP1,
RDMA_PS_UDP port 7174), so the peer may be udaddy itself over rxe or another
xdproce udaddy. Without -s it is the server: it answers -c requests, each
with a UD queue pair of its own, waits for -C datagrams on each, and sends
-C back to the queue pair that sent them (the immediate data names it). With
-s it is the client: it resolves the server -c times, sends -C datagrams
(SEND with immediate, -S bytes, Q_Key 0x01234567) on each queue pair and
waits for the -C replies. Both print udaddy's progress lines and "return
status N" (0 on success; a refused or unanswered resolution prints
udaddy's "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: N" line first:
N is the SIDR_REP status, or -110 when no answer came).

-b is the address to listen on (server) or send from (client); it must be
one of --dev's. -t sets the datagrams' traffic class. -P udp and -p 0x111
name RDMA_PS_UDP, the only port space served. Unlike udaddy, the server
prints its first line once it listens. Like the stock tools, nothing is
authenticated: a test tool for networks you control.

EXAMPLES
  sudo xdproce udaddy --dev eth1
  sudo xdproce udaddy --dev eth1 -s 198.51.100.2 -c 2 -C 10 -S 100`,
	Setup: setupUdaddy,
}

// udaddy's defaults (librdmacm/examples/udaddy.c).
const (
	udaddyPort  = 7174
	udaddyCount = 10
	udaddySize  = 100
)

func setupUdaddy(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	server := fs.String("s", "", "the server's `address` (makes this the client)")
	bind := fs.String("b", "", "`address` to listen on or send from (one of --dev's)")
	conns := fs.Int("c", 1, "`connections`")
	count := fs.Int("C", udaddyCount, "`datagrams` each way on each connection")
	size := fs.Int("S", udaddySize, "datagram `bytes`")
	tos := fs.String("t", "", "traffic class (`TOS`) of the datagrams")
	ps := fs.String("p", "0x111", "port `space` (only 0x111, RDMA_PS_UDP)")
	psName := fs.String("P", "udp", "port `space` by name (only udp)")
	format := fs.String("f", "ip", "address `format` (only ip)")
	timeout := fs.Duration("connect-timeout", 2*time.Minute, "how long the client waits for each resolution")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce udaddy"
		u := &udaddy{env: env, out: env.Stdout, conns: *conns, count: *count, size: *size}
		if *size == 0 {
			u.count = 0 // as udaddy: no message size, no messages
		}
		switch {
		case len(args) != 0:
			return usageErrorf(cmd, "unexpected arguments %q", args)
		case *conns < 1:
			return usageErrorf(cmd, "-c %d: want 1 or more connections", *conns)
		case *count < 0 || *size < 0:
			return usageErrorf(cmd, "-C %d -S %d: want counts and sizes of 0 or more", *count, *size)
		case !strings.EqualFold(*psName, "udp"):
			return usageErrorf(cmd, "-P %s: only udp (RDMA_PS_UDP) is served", *psName)
		case !strings.EqualFold(*format, "ip"):
			return usageErrorf(cmd, "-f %s: only ip (numeric addresses)", *format)
		}
		if v, err := strconv.ParseUint(*ps, 0, 16); err != nil || v != 0x111 {
			return usageErrorf(cmd, "-p %s: only 0x111 (RDMA_PS_UDP) is served", *ps)
		}
		tv, _, err := cmToolTOS(cmd, *tos)
		if err != nil {
			return err
		}
		u.tos = tv
		dst, src, err := cmToolAddrs(cmd, *server, *bind)
		if err != nil {
			return err
		}
		return cmToolRun(ctx, env, cmd, "udaddy", &df, src, u.out, func(dev *roce.Device) (int, error) {
			u.dev = dev
			if dst.IsValid() {
				return u.client(ctx, dst, *timeout)
			}
			return u.serve(ctx)
		}, u.destroy)
	}
}

// udaddy is one end of a run: a node (UD queue pair, CQ, one message
// buffer) per connection.
type udaddy struct {
	env                *Env
	out                io.Writer
	dev                *roce.Device
	conns, count, size int
	tos                uint8
	nodes              []*udNode
}

type udNode struct {
	cq  *roce.CQ
	qp  *roce.QP
	mr  *roce.MR
	buf []byte // GRH area, then the message
	ah  *roce.AH
}

// checkSize is udaddy's verify_test_params: a datagram fits the active MTU.
func (u *udaddy) checkSize() error {
	if mtu := u.dev.PathMTU().Bytes(); u.count > 0 && u.size > mtu {
		fmt.Fprintf(u.out, "udaddy: message_size %d is larger than active mtu %d\n", u.size, mtu)
		return errors.New("message size larger than the active MTU")
	}
	return nil
}

// node makes a connection's queue pair (RTS, Q_Key 0x01234567, as
// rdma_create_qp leaves a UDP id's) with its receives posted.
func (u *udaddy) node() (*udNode, error) {
	if err := u.checkSize(); err != nil {
		return nil, err
	}
	n, err := newUDNode(u.dev, u.size, u.count, true)
	u.nodes = append(u.nodes, n) // closed with the others, whole or not
	if err != nil {
		return nil, err
	}
	return n, nil
}

// newUDNode makes a UD queue pair in a protection domain of its own (RTS,
// Q_Key 0x01234567, as rdma_create_qp leaves a UDP id's) with queues count
// deep and a buffer of the GRH and size bytes; with recv, count receives
// posted into that one buffer, as udaddy and mckey post them. On failure
// it returns the node as far as it was made, for its owner to close.
func newUDNode(dev *roce.Device, size, count int, recv bool) (*udNode, error) {
	n := &udNode{buf: make([]byte, roce.GRHLen+size)}
	pd := dev.AllocPD()
	depth := max(count, 1)
	var err error
	if n.cq, err = dev.CreateCQ(2 * depth); err != nil {
		return n, err
	}
	if n.mr, err = pd.RegMR(n.buf, roce.LocalWrite); err != nil {
		return n, err
	}
	if n.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.UD, SendCQ: n.cq, RecvCQ: n.cq, MaxSendWR: depth, MaxRecvWR: depth, MaxSGE: 1}); err != nil {
		return n, err
	}
	if err := n.qp.Activate(roce.UDPQKey, 0); err != nil {
		return n, err
	}
	if !recv {
		return n, nil
	}
	for i := range count {
		if err := n.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: n.sge(roce.GRHLen + size)}); err != nil {
			return n, err
		}
	}
	return n, nil
}

// await waits for count successful completions on the node's CQ and hands
// each batch of them to each (udaddy and mckey wait alike).
func (n *udNode) await(ctx context.Context, count int, each func([]roce.WC) error) error {
	wcs := make([]roce.WC, 8)
	for done := 0; done < count; {
		k, err := n.cq.Wait(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != roce.WCSuccess {
				return fmt.Errorf("queue pair %#x: %v completed with %v", n.qp.QPN(), wc.Opcode, wc.Status)
			}
		}
		if k > 0 {
			if err := each(wcs[:k]); err != nil {
				return err
			}
		}
		done += k
	}
	return nil
}

func (n *udNode) sge(length int) []roce.SGE {
	return []roce.SGE{{Addr: n.mr.Addr(), Length: uint32(length), LKey: n.mr.LKey()}}
}

// sends posts count SENDs with immediate (the sender's QPN) to the node's
// address handle, signaled or not.
func (u *udaddy) sends(n *udNode, signaled bool) error {
	var flags roce.SendFlags
	if signaled {
		flags = roce.Signaled
	}
	sgl := n.sge(u.size)
	sgl[0].Addr += roce.GRHLen
	for i := range u.count {
		if err := n.qp.PostSendAH(roce.SendWR{ID: uint64(i), Opcode: roce.WRSendImm, Flags: flags, Imm: n.qp.QPN(), SGL: sgl}, n.ah); err != nil {
			return err
		}
	}
	return nil
}

// poll waits for count completions on every node's CQ; a node without an
// address handle (the server's) takes the sender of its first datagram as
// the one to reply to, as ibv_create_ah_from_wc does.
func (u *udaddy) poll(ctx context.Context) error {
	for _, n := range u.nodes {
		err := n.await(ctx, u.count, func(wcs []roce.WC) error {
			if n.ah != nil {
				return nil
			}
			var err error
			if n.ah, err = u.dev.CreateAH(roce.GIDFromIP(roce.GRHSource(n.buf[:roce.GRHLen])), wcs[0].ImmData, roce.UDPQKey); err != nil {
				return err
			}
			n.ah.AV.TOS = u.tos
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// serve answers conns resolutions, then receives and replies.
func (u *udaddy) serve(ctx context.Context) (int, error) {
	l, err := u.dev.ListenSIDR(udaddyPort)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	fmt.Fprintln(u.out, "udaddy: starting server")
	for range u.conns {
		r, err := l.Accept(ctx)
		if err != nil {
			return 0, err
		}
		n, err := u.node()
		if err == nil {
			err = r.Accept(n.qp, nil)
		}
		if err != nil {
			fmt.Fprintln(u.out, "udaddy: failing connection request")
			r.Reject(nil) //nolint:errcheck // the error reported is err
			return 0, err
		}
	}
	if u.count == 0 {
		return 0, nil
	}
	fmt.Fprintln(u.out, "receiving data transfers")
	if err := u.poll(ctx); err != nil {
		return 0, err
	}
	fmt.Fprintln(u.out, "sending replies")
	for _, n := range u.nodes {
		if err := u.sends(n, true); err != nil {
			return 0, err
		}
	}
	if err := u.poll(ctx); err != nil {
		return 0, err
	}
	fmt.Fprintln(u.out, "data transfers complete")
	return 0, nil
}

// client resolves the server conns times, sends and receives.
func (u *udaddy) client(ctx context.Context, dst netip.Addr, timeout time.Duration) (int, error) {
	fmt.Fprintln(u.out, "udaddy: starting client")
	fmt.Fprintln(u.out, "udaddy: connecting")
	for range u.conns {
		n, err := u.node()
		if err != nil {
			return 0, err
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		rep, err := u.dev.DialSIDR(cctx, netip.AddrPortFrom(dst, udaddyPort), nil, nil)
		cancel()
		var se *roce.SIDRError
		switch {
		case errors.As(err, &se):
			return u.unreachable(int(se.Status)), nil
		case errors.Is(err, roce.ErrCMTimeout), err != nil && ctx.Err() == nil && cctx.Err() != nil:
			return u.unreachable(-110), nil // -ETIMEDOUT, as rdma_cm reports it
		case err != nil:
			return 0, err
		}
		n.ah = rep.AH
		n.ah.AV.TOS = u.tos
	}
	if u.count == 0 {
		return 0, nil
	}
	fmt.Fprintln(u.out, "initiating data transfers")
	for _, n := range u.nodes {
		if err := u.sends(n, false); err != nil {
			return 0, err
		}
	}
	fmt.Fprintln(u.out, "receiving data transfers")
	if err := u.poll(ctx); err != nil {
		return 0, err
	}
	fmt.Fprintln(u.out, "data transfers complete")
	return 0, nil
}

// unreachable prints udaddy's line for a failed resolution and returns the
// status it exits with.
func (u *udaddy) unreachable(status int) int {
	fmt.Fprintf(u.out, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: %d\n", status)
	return status
}

// destroy takes the nodes' queue pairs down.
func (u *udaddy) destroy() {
	for _, n := range u.nodes {
		if n.qp != nil {
			n.qp.Destroy() //nolint:errcheck // the run's result is reported
		}
	}
}
