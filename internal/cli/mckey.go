package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/xdproce/xdproce/roce"
)

var mckeyCommand = &Command{
	Name:       "mckey",
	ShortUsage: "xdproce mckey --dev IF -m GROUP [-s] [-b ADDR] [-c CONNECTIONS] [-C COUNT] [-S SIZE] [-p 0x111] [-o] [-l]",
	ShortHelp:  "send or receive UD datagrams on a multicast group, as librdmacm's mckey does",
	LongHelp: `Mckey is librdmacm's mckey on xdproce: UD queue pairs joined to the multicast
group -m, as rdma_join_multicast joins one on RoCE (an IGMP or MLD join on the
interface and the queue pair attached to the group's GID, ::ffff:A.B.C.D for an
IPv4 group; no MAD), so the peers may be mckey itself over rxe or other xdproce
mckeys. Each of -c connections has a queue pair of its own (Q_Key 0x01234567,
RDMA_UDP_QKEY). After joining it pauses 3 seconds (--pause), as mckey does for
the subnet manager. Without -s it receives: -C datagrams on each queue pair.
With -s it sends -C datagrams of -S bytes (SEND with immediate, the sender's
QPN) from each queue pair to the group (QPN 0xFFFFFF). Both print mckey's
lines and "return status N".

-b is the address to send from (one of --dev's; Linux's mckey needs it, or a
route to the group, to pick its device). -o joins send-only: no IGMP/MLD join
and no attach (as RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER on RoCE). -l asks for
no multicast loopback: xdproce never loops its own group frames back, so it
changes nothing. -p 0x111 names RDMA_PS_UDP, the only port space served; -M
(an AF_IB address) has no meaning on RoCE and is refused. Unlike mckey, the
sender waits for its sends to complete before it leaves the group (mckey
posts them unsignaled and destroys its queue pair at once), and the receiver
fails on a completion that is not a SEND of -S bytes with the sender's QPN
as its immediate. Like the
stock tools, nothing is authenticated: a test tool for networks you control.

EXAMPLES
  sudo xdproce mckey --dev eth1 -m 239.1.2.3
  sudo xdproce mckey --dev eth1 -m 239.1.2.3 -s -C 10 -S 100`,
	Setup: setupMckey,
}

// mckey's defaults (librdmacm/examples/mckey.c).
const (
	mckeyCount = 10
	mckeySize  = 100
	mckeyPause = 3 * time.Second // mckey's sleep(3) after joining
)

func setupMckey(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	group := fs.String("m", "", "multicast group `address` (required)")
	unmapped := fs.String("M", "", "unmapped (AF_IB) multicast `address`: refused on RoCE")
	sender := fs.Bool("s", false, "send (default: receive)")
	bind := fs.String("b", "", "`address` to send from (one of --dev's)")
	conns := fs.Int("c", 1, "`connections` (queue pairs joined to the group)")
	count := fs.Int("C", mckeyCount, "`datagrams` sent or received on each queue pair")
	size := fs.Int("S", mckeySize, "datagram `bytes`")
	ps := fs.String("p", "0x111", "port `space` (only 0x111, RDMA_PS_UDP)")
	sendOnly := fs.Bool("o", false, "join send-only (no IGMP/MLD join, no attach)")
	fs.Bool("l", false, "no multicast loopback (xdproce never loops its group frames back)")
	pause := fs.Duration("pause", mckeyPause, "how long to pause after joining")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce mckey"
		m := &mckey{out: env.Stdout, sender: *sender, sendOnly: *sendOnly, conns: *conns, count: *count, size: *size}
		if *size == 0 {
			m.count = 0 // as mckey: no message size, no messages
		}
		switch {
		case len(args) != 0:
			return usageErrorf(cmd, "unexpected arguments %q", args)
		case *unmapped != "":
			return usageErrorf(cmd, "-M %s: unmapped (AF_IB) addresses need InfiniBand; use -m", *unmapped)
		case *group == "":
			return usageErrorf(cmd, "-m GROUP is required")
		case *conns < 1:
			return usageErrorf(cmd, "-c %d: want 1 or more connections", *conns)
		case *count < 0 || *size < 0:
			return usageErrorf(cmd, "-C %d -S %d: want counts and sizes of 0 or more", *count, *size)
		case *pause < 0:
			return usageErrorf(cmd, "--pause %v: want 0 or more", *pause)
		}
		if v, err := strconv.ParseUint(*ps, 0, 16); err != nil || v != 0x111 {
			return usageErrorf(cmd, "-p %s: only 0x111 (RDMA_PS_UDP) is served", *ps)
		}
		g, err := netip.ParseAddr(*group)
		if err != nil || !g.Unmap().IsMulticast() {
			return usageErrorf(cmd, "-m %q: want an IPv4 or IPv6 multicast address", *group)
		}
		m.group = g.Unmap()
		_, src, err := cmToolAddrs(cmd, "", *bind)
		if err != nil {
			return err
		}
		m.src = src
		return cmToolRun(ctx, env, cmd, "mckey", &df, src, m.out, func(dev *roce.Device) (int, error) {
			m.dev = dev
			return m.run(ctx, *pause)
		}, m.destroy)
	}
}

// mckey is one end of a run: a node (UD queue pair, CQ, one message buffer)
// per connection, all joined to one group.
type mckey struct {
	out                io.Writer
	dev                *roce.Device
	group, src         netip.Addr
	sender, sendOnly   bool
	conns, count, size int
	leave              func() error // the interface's membership (nil: none)
	nodes              []*udNode
}

// run joins, pauses, then sends or receives, and leaves.
func (m *mckey) run(ctx context.Context, pause time.Duration) (int, error) {
	if m.sender {
		fmt.Fprintln(m.out, "mckey: starting client")
	} else {
		fmt.Fprintln(m.out, "mckey: starting server")
	}
	fmt.Fprintln(m.out, "mckey: joining")
	if mtu := m.dev.PathMTU().Bytes(); m.count > 0 && m.size > mtu {
		fmt.Fprintf(m.out, "mckey: message_size %d is larger than active mtu %d\n", m.size, mtu)
		return 0, errors.New("message size larger than the active MTU")
	}
	gid := roce.GIDFromIP(m.group)
	av, err := m.dev.ResolveAV(gid, m.srcGID())
	if err != nil {
		return 0, err
	}
	if !m.sendOnly {
		if m.leave, err = m.dev.JoinGroup(m.group); err != nil {
			return 0, err
		}
	}
	for range m.conns {
		n, err := m.node(av)
		if err != nil {
			return 0, err
		}
		if !m.sendOnly {
			if err := n.qp.AttachMcast(gid); err != nil {
				return 0, err
			}
		}
		// RoCE has no multicast LID; the service level is 0 (a traffic class of 0).
		fmt.Fprintf(m.out, "mckey: joined dgid: %s mlid 0x0 sl 0\n", gid)
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(pause):
	}
	if m.count > 0 {
		if m.sender {
			fmt.Fprintln(m.out, "initiating data transfers")
			if err := m.send(ctx); err != nil {
				return 0, err
			}
		} else {
			fmt.Fprintln(m.out, "receiving data transfers")
			if err := m.receive(ctx); err != nil {
				return 0, err
			}
		}
		fmt.Fprintln(m.out, "data transfers complete")
	}
	return 0, m.leaveGroup()
}

// srcGID is -b's address as a GID, or the zero Addr (the device picks).
func (m *mckey) srcGID() netip.Addr {
	if !m.src.IsValid() {
		return netip.Addr{}
	}
	return roce.GIDFromIP(m.src)
}

// node makes a connection's queue pair (RTS, Q_Key 0x01234567, as
// rdma_create_qp leaves a UDP id's), its receives posted on a receiver, and
// its address handle for the group.
func (m *mckey) node(av roce.AddressVector) (*udNode, error) {
	n, err := newUDNode(m.dev, m.size, m.count, !m.sender)
	n.ah = &roce.AH{AV: av, QPN: roce.MulticastQPN, QKey: roce.UDPQKey}
	m.nodes = append(m.nodes, n) // closed with the others, whole or not
	if err != nil {
		return nil, err
	}
	return n, nil
}

// send posts count SENDs with immediate (the sender's QPN) to the group from
// every node and waits for their completions.
func (m *mckey) send(ctx context.Context) error {
	for _, n := range m.nodes {
		sgl := n.sge(m.size)
		for i := range m.count {
			if err := n.qp.PostSendAH(roce.SendWR{ID: uint64(i), Opcode: roce.WRSendImm, Flags: roce.Signaled, Imm: n.qp.QPN(), SGL: sgl}, n.ah); err != nil {
				return err
			}
		}
	}
	return m.poll(ctx, func(roce.WC) error { return nil })
}

// receive waits for count datagrams on every node: SENDs with immediate of
// -S bytes (after the 40-byte GRH area) whose immediate is the sending
// queue pair's number, as mckey sends them.
func (m *mckey) receive(ctx context.Context) error {
	return m.poll(ctx, func(wc roce.WC) error {
		if wc.Opcode != roce.WCRecv || !wc.WithImm || int(wc.ByteLen) != roce.GRHLen+m.size {
			return fmt.Errorf("a datagram of %d bytes (%v, immediate %v), want a SEND with immediate of %d", int(wc.ByteLen)-roce.GRHLen, wc.Opcode, wc.WithImm, m.size)
		}
		if wc.ImmData != wc.SrcQPN {
			return fmt.Errorf("a datagram from queue pair %#x with immediate %#x, want the sender's QPN", wc.SrcQPN, wc.ImmData)
		}
		return nil
	})
}

// poll waits for count successful completions on every node's CQ, each
// passing check.
func (m *mckey) poll(ctx context.Context, check func(roce.WC) error) error {
	for _, n := range m.nodes {
		err := n.await(ctx, m.count, func(wcs []roce.WC) error {
			for _, wc := range wcs {
				if err := check(wc); err != nil {
					return fmt.Errorf("queue pair %#x: %w", n.qp.QPN(), err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// leaveGroup detaches every node and leaves the interface's membership.
func (m *mckey) leaveGroup() error {
	if m.leave == nil {
		return nil
	}
	gid := roce.GIDFromIP(m.group)
	var err error
	for _, n := range m.nodes {
		if n.qp != nil {
			err = errors.Join(err, n.qp.DetachMcast(gid))
		}
	}
	err = errors.Join(err, m.leave())
	m.leave = nil
	return err
}

// destroy leaves the group if a failed run did not, and takes the nodes'
// queue pairs down.
func (m *mckey) destroy() {
	m.leaveGroup() //nolint:errcheck // the run's result is reported
	for _, n := range m.nodes {
		if n.qp != nil {
			n.qp.Destroy() //nolint:errcheck // the run's result is reported
		}
	}
}
