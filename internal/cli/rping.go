package cli

import (
	"bytes"
	"context"
	endian "encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdproce/xdproce/roce"
)

var rpingCommand = &Command{
	Name:       "rping",
	ShortUsage: "xdproce rping --dev IF (-s | -c) [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d]",
	ShortHelp:  "ping a peer with RDMA READ and WRITE over an RDMA CM connection, as librdmacm's rping does",
	LongHelp: `Rping is librdmacm's rping on xdproce: the connection is set up by the RDMA
connection manager (REQ, REP, RTU on QP1, RDMA_PS_TCP port -p), so the peer
may be rping itself over rxe or another xdproce rping. The server (-s) waits
for one client, serves it until it disconnects and exits; the client (-c)
connects to -a and runs -C pings (0: until interrupted), then disconnects.

Each ping is rping's: the client SENDs the address, rkey and size of its
source buffer (filled with "rdma-ping-N: " and a run of letters), the server
RDMA READs it and SENDs a go-ahead, the client SENDs its sink buffer, the
server RDMA WRITEs what it read there and SENDs a go-ahead.

-S is the buffer size (rping's range 24 to 65535, default 64), -v prints the
data of each ping ("ping data: ..." on the client, "server ping data: ..." on
the server), -V makes the client compare its sink with its source (a
difference ends it with "data mismatch!"), -d logs each step to standard
error. -a is the address to listen on (server; it must be one of --dev's) or
connect to (client). The private data of the CM is unauthenticated, as with
the stock tools: a test tool for networks you control.

EXAMPLES
  sudo xdproce rping --dev eth1 -s -a 198.51.100.2 -v
  sudo xdproce rping --dev eth1 -c -a 198.51.100.2 -C 10 -S 4096 -V -v
  rping -s -a 198.51.100.2 -v &  xdproce rping --dev eth1 -c -a 198.51.100.2 -C 3 -v`,
	Setup: setupRping,
}

// rping's defaults and limits (librdmacm/examples/rping.c).
const (
	rpingPort    = 7174
	rpingSize    = 64
	rpingMinSize = 24 // "rdma-ping-%d: " of the largest count, and room
	rpingMaxSize = 65535
	rpingInfoLen = 16 // {be64 buf; be32 rkey; be32 size}
)

func setupRping(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, true)
	server := fs.Bool("s", false, "run the server")
	client := fs.Bool("c", false, "run the client")
	addr := fs.String("a", "", "`address` to listen on (server) or connect to (client)")
	port := fs.Int("p", rpingPort, "rdma_cm `port`")
	count := fs.Int("C", 0, "`pings` the client runs (0: until interrupted)")
	size := fs.Int("S", rpingSize, "buffer `bytes`, 24 to 65535")
	verbose := fs.Bool("v", false, "print the data of each ping")
	validate := fs.Bool("V", false, "client: check that the data written back equals the data read")
	debug := fs.Bool("d", false, "log each step to standard error")
	timeout := fs.Duration("connect-timeout", 30*time.Second, "how long the client waits for the connection")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce rping"
		switch {
		case len(args) != 0:
			return usageErrorf(cmd, "unexpected arguments %q", args)
		case *server == *client:
			return usageErrorf(cmd, "want one of -s (server) and -c (client)")
		case *client && *addr == "":
			return usageErrorf(cmd, "-c needs -a ADDR, the server's address")
		case *port <= 0 || *port > 65535:
			return usageErrorf(cmd, "-p %d: want a port 1 to 65535", *port)
		case *size < rpingMinSize || *size > rpingMaxSize:
			return usageErrorf(cmd, "-S %d: want %d to %d bytes", *size, rpingMinSize, rpingMaxSize)
		case *count < 0:
			return usageErrorf(cmd, "-C %d: want 0 (forever) or more pings", *count)
		}
		var ip netip.Addr
		if *addr != "" {
			var err error
			if ip, err = netip.ParseAddr(*addr); err != nil {
				return usageErrorf(cmd, "-a %q: want an IPv4 or IPv6 address", *addr)
			}
			ip = ip.Unmap()
		}
		dev, err := openDevice(env, cmd, &df)
		if err != nil {
			return err
		}
		defer closeDevice(env, dev)
		r := &rping{env: env, dev: dev.Device, size: *size, verbose: *verbose, validate: *validate, debug: *debug}
		if *server {
			if ip.IsValid() && !dev.hasAddr(ip) {
				return fmt.Errorf("rping: -a %v is not an address of %s (its GIDs: %v)", ip, dev.Name(), dev.GIDs())
			}
			err = r.serve(ctx, uint16(*port))
		} else {
			err = r.client(ctx, netip.AddrPortFrom(ip, uint16(*port)), *count, *timeout)
		}
		if err != nil {
			return fmt.Errorf("rping: %w", interrupted(ctx, err))
		}
		return nil
	}
}

// hasAddr reports whether ip is one of the device's addresses.
func (d *device) hasAddr(ip netip.Addr) bool {
	for _, g := range d.GIDs() {
		if roce.IPFromGID(g) == ip {
			return true
		}
	}
	return false
}

// rping is one end of an rping run: its queue pair and buffers. The buffer
// is one registered region: the receive area, the send area, the sink (rdma
// buffer) and, on the client, the source (start buffer).
type rping struct {
	env                      *Env
	dev                      *roce.Device
	size                     int
	verbose, validate, debug bool

	scq, rcq *roce.CQ
	qp       *roce.QP
	mr       *roce.MR
	buf      []byte
}

const (
	rpingRecvOff = 0
	rpingSendOff = rpingInfoLen
	rpingRDMAOff = 2 * rpingInfoLen
)

func (r *rping) startOff() int { return rpingRDMAOff + r.size }

func (r *rping) logf(format string, args ...any) {
	if r.debug {
		fmt.Fprintf(r.env.Stderr, format+"\n", args...)
	}
}

// setup makes the queue pair (rping's SQ 16, RQ 2, one SGE) and buffers.
func (r *rping) setup() error {
	var err error
	if r.scq, err = r.dev.CreateCQ(16); err != nil {
		return err
	}
	if r.rcq, err = r.dev.CreateCQ(16); err != nil {
		return err
	}
	pd := r.dev.AllocPD()
	r.buf = make([]byte, rpingRDMAOff+2*r.size)
	if r.mr, err = pd.RegMR(r.buf, roce.LocalWrite|roce.RemoteRead|roce.RemoteWrite); err != nil {
		return err
	}
	r.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: r.scq, RecvCQ: r.rcq, MaxSendWR: 16, MaxRecvWR: 2, MaxSGE: 1})
	if err != nil {
		return err
	}
	// As rping: the receive is posted before the connection exists (the
	// queue pair in INIT, where rdma_create_qp leaves it), so the peer's
	// first SEND finds it.
	if err := r.qp.Modify(&roce.Attr{State: roce.StateInit, Access: roce.LocalWrite | roce.RemoteRead | roce.RemoteWrite}, roce.AttrState|roce.AttrAccessFlags); err != nil {
		return err
	}
	return r.postRecv()
}

func (r *rping) cmOptions() *roce.CMOptions {
	co := roce.DefaultConnectOptions()
	co.RetryCnt, co.RNRRetry = 7, 7
	return &roce.CMOptions{ResponderResources: 1, InitiatorDepth: 1, Connect: &co}
}

func (r *rping) sge(off, n int) []roce.SGE {
	return []roce.SGE{{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}}
}

func (r *rping) postRecv() error {
	return r.qp.PostRecv(roce.RecvWR{ID: 1, SGL: r.sge(rpingRecvOff, rpingInfoLen)})
}

// post posts one signaled work request and waits for its completion.
func (r *rping) post(ctx context.Context, wr roce.SendWR) error {
	wr.Flags |= roce.Signaled
	if err := r.qp.PostSend(wr); err != nil {
		return err
	}
	wc, err := r.wait(ctx, r.scq)
	if err != nil {
		return err
	}
	if wc.Status != roce.WCSuccess {
		return fmt.Errorf("%v completed with %v", wr.Opcode, wc.Status)
	}
	return nil
}

// sendInfo SENDs {addr, rkey, size} of the buffer at off.
func (r *rping) sendInfo(ctx context.Context, off, n int) error {
	b := r.buf[rpingSendOff : rpingSendOff+rpingInfoLen]
	endian.BigEndian.PutUint64(b, r.mr.Addr()+uint64(off))
	endian.BigEndian.PutUint32(b[8:], r.mr.RKey())
	endian.BigEndian.PutUint32(b[12:], uint32(n))
	return r.post(ctx, roce.SendWR{ID: 2, Opcode: roce.WRSend, SGL: r.sge(rpingSendOff, rpingInfoLen)})
}

// recv waits for the next message and reposts the receive, as rping's
// receive handler does; a flushed receive means the peer disconnected.
func (r *rping) recv(ctx context.Context) (addr uint64, rkey, n uint32, err error) {
	wc, err := r.wait(ctx, r.rcq)
	if err != nil {
		return 0, 0, 0, err
	}
	if wc.Status == roce.WCWRFlushErr {
		return 0, 0, 0, errRpingDisconnected
	}
	if wc.Status != roce.WCSuccess {
		return 0, 0, 0, fmt.Errorf("receive completed with %v", wc.Status)
	}
	b := r.buf[rpingRecvOff : rpingRecvOff+rpingInfoLen]
	addr, rkey, n = endian.BigEndian.Uint64(b), endian.BigEndian.Uint32(b[8:]), endian.BigEndian.Uint32(b[12:])
	return addr, rkey, n, r.postRecv()
}

var errRpingDisconnected = errors.New("disconnected")

func (r *rping) wait(ctx context.Context, cq *roce.CQ) (roce.WC, error) {
	var wcs [1]roce.WC
	if _, err := cq.Wait(ctx, wcs[:]); err != nil {
		return roce.WC{}, err
	}
	return wcs[0], nil
}

// cString is b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// serve accepts one client and serves its pings until it disconnects.
func (r *rping) serve(ctx context.Context, port uint16) error {
	if err := r.setup(); err != nil {
		return err
	}
	l, err := r.dev.ListenCM(port, r.cmOptions())
	if err != nil {
		return err
	}
	defer l.Close()
	r.logf("rping server listening on %s port %d", r.dev.Name(), port)
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	r.logf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST from %v", req.Remote)
	k, err := req.Accept(ctx, r.qp, nil)
	if err != nil {
		return err
	}
	r.logf("cma_event type RDMA_CM_EVENT_ESTABLISHED")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = r.serveLoop(ctx)
	if errors.Is(err, errRpingDisconnected) {
		// rping's two lines: the CM event, then its loop's failed wait for
		// the next buffer-info message (state 10: DISCONNECTED).
		fmt.Fprintln(r.env.Stderr, "server DISCONNECT EVENT...")
		fmt.Fprintln(r.env.Stderr, "wait for RDMA_READ_ADV state 10")
		return nil
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	k.Disconnect(dctx) //nolint:errcheck // the run's error is the one to report
	return err
}

func (r *rping) serveLoop(ctx context.Context) error {
	sink := r.buf[rpingRDMAOff : rpingRDMAOff+r.size]
	for {
		addr, rkey, n, err := r.recv(ctx)
		if err != nil {
			return err
		}
		r.logf("received rkey %#x addr %#x len %d from peer", rkey, addr, n)
		if int(n) > r.size {
			return fmt.Errorf("the client's buffer (%d bytes) is larger than -S %d", n, r.size)
		}
		if err := r.post(ctx, roce.SendWR{ID: 3, Opcode: roce.WRRDMARead, SGL: r.sge(rpingRDMAOff, int(n)), RemoteAddr: addr, RKey: rkey}); err != nil {
			return err
		}
		r.logf("server received read complete")
		if r.verbose {
			fmt.Fprintf(r.env.Stdout, "server ping data: %s\n", cString(sink))
		}
		if err := r.post(ctx, roce.SendWR{ID: 2, Opcode: roce.WRSend, SGL: r.sge(rpingSendOff, rpingInfoLen)}); err != nil {
			return err
		}
		r.logf("server posted go ahead")
		if addr, rkey, n, err = r.recv(ctx); err != nil {
			return err
		}
		r.logf("received rkey %#x addr %#x len %d from peer", rkey, addr, n)
		wlen := min(len(cString(sink))+1, r.size, int(n))
		if err := r.post(ctx, roce.SendWR{ID: 4, Opcode: roce.WRRDMAWrite, SGL: r.sge(rpingRDMAOff, wlen), RemoteAddr: addr, RKey: rkey}); err != nil {
			return err
		}
		r.logf("server rdma write complete")
		if err := r.post(ctx, roce.SendWR{ID: 2, Opcode: roce.WRSend, SGL: r.sge(rpingSendOff, rpingInfoLen)}); err != nil {
			return err
		}
		r.logf("server posted go ahead")
	}
}

// client connects to dst and runs count pings (0: until ctx ends).
func (r *rping) client(ctx context.Context, dst netip.AddrPort, count int, timeout time.Duration) error {
	if err := r.setup(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	k, err := r.dev.DialCM(cctx, r.qp, dst, nil, r.cmOptions())
	cancel()
	if err != nil {
		return err
	}
	r.logf("cma_event type RDMA_CM_EVENT_ESTABLISHED")
	err = r.pings(ctx, count)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	derr := k.Disconnect(dctx)
	if derr == nil {
		fmt.Fprintln(r.env.Stderr, "client DISCONNECT EVENT...")
	}
	if err == nil {
		err = derr
	}
	return err
}

func (r *rping) pings(ctx context.Context, count int) error {
	start := r.buf[r.startOff() : r.startOff()+r.size]
	sink := r.buf[rpingRDMAOff : rpingRDMAOff+r.size]
	c0 := byte('A')
	for ping := 0; count == 0 || ping < count; ping++ {
		fillRping(start, ping, c0)
		if c0++; c0 > 'z' {
			c0 = 'A'
		}
		if err := r.sendInfo(ctx, r.startOff(), r.size); err != nil {
			return err
		}
		if _, _, _, err := r.recv(ctx); err != nil {
			return err
		}
		r.logf("client received go ahead for the read")
		if err := r.sendInfo(ctx, rpingRDMAOff, r.size); err != nil {
			return err
		}
		if _, _, _, err := r.recv(ctx); err != nil {
			return err
		}
		r.logf("client received go ahead after the write")
		if r.validate && !bytes.Equal(cString(start), cString(sink)) {
			fmt.Fprintln(r.env.Stderr, "data mismatch!")
			return errors.New("data mismatch")
		}
		if r.verbose {
			fmt.Fprintf(r.env.Stdout, "ping data: %s\n", cString(sink))
		}
		clear(sink)
	}
	return nil
}

// fillRping writes rping's source data: "rdma-ping-N: ", then letters from
// c0 counting up through 'z' and wrapping to 'A', NUL in the last byte.
func fillRping(b []byte, ping int, c0 byte) {
	n := copy(b, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := c0
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 'z' {
			c = 'A'
		}
	}
	b[len(b)-1] = 0
}
