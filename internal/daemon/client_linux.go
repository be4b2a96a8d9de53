package daemon

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce/place"
)

// handshakeTimeout bounds a client's hello.
const handshakeTimeout = 3 * time.Second

// rxBatch is the number of frames read from a port or the uplink at once.
const rxBatch = 64

// A client is one attached process.
type client struct {
	d             *Daemon
	id            int
	pid, uid, gid int32
	cmd           string
	conn          *net.UnixConn
	port          *shm.Link
	block         int
	first, last   uint32
	since         time.Time
	endOnce       sync.Once
	ending        atomic.Bool       // end was called: serve stops at its next batch
	fromClient    atomic.Uint64     // frames read from the client
	toClient      atomic.Uint64     // frames delivered to it
	dropForeign   atomic.Uint64     // its UD frames naming a source QPN not its own
	dropConn      atomic.Uint64     // its RC/UC frames to a local queue pair not connected to it (conn_linux.go)
	dropBadSource atomic.Uint64     // its frames from an address not the interface's
	dropMalformed atomic.Uint64     // its frames that are not RoCEv2
	overflow      atomic.Uint64     // frames for it dropped: its port was full
	snap          [snapLen]byte     // private copy of the header being steered (client goroutine)
	whole         [qp1FrameMax]byte // private copy of a QP1 frame being steered (client goroutine)
	commFirst     uint32            // its RDMA CM communication IDs (Daemon.commRange)
	commLast      uint32
	services      int // service IDs it holds (guarded by Daemon.svc.mu)
	groups        int // groups it joined (guarded by Daemon.grp.mu)
	rx            [rxBatch][]byte
	hdr           header
	txMu          sync.Mutex // serializes deliveries into the port (its sending side)
	mem           regions    // its shared memory regions (guarded by Daemon.memMu)
	gone          bool       // released: no more regions (guarded by Daemon.memMu)
	pm            place.Msg  // the placement message being handled (client goroutine)
	grMu          sync.Mutex // guards grants; held by a copy on a grant
	grants        map[uint32]*grant
	cn            conns     // its connected queue pairs (conn_linux.go)
	kicks         []*client // clients to signal at the end of the batch (kick_linux.go; client goroutine)
	wire          wireTx    // its frames to the wire in the batch (egress_linux.go; client goroutine)
}

// accept takes clients until the listener closes.
func (d *Daemon) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				d.log.Error("accept", "err", err)
			}
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.admit(c)
		}()
	}
}

// admit runs the handshake with a new connection: peer credentials, hello,
// limits, QPN block, port. On success the client is served until it goes.
func (d *Daemon) admit(conn *net.UnixConn) {
	c := &client{d: d, conn: conn, since: time.Now()}
	credErr := errors.New("no socket")
	if raw, err := conn.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			var cred *unix.Ucred
			if cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); credErr == nil {
				c.pid, c.uid, c.gid = cred.Pid, int32(cred.Uid), int32(cred.Gid)
			}
		})
	}
	refuse := func(why string, args ...any) {
		d.log.Warn("client refused", append([]any{"pid", c.pid, "uid", c.uid, "why", why}, args...)...)
		proto.Write(conn, &proto.Welcome{Version: proto.Version, Error: why})
		conn.Close()
	}
	if credErr != nil {
		refuse("peer credentials unreadable: " + credErr.Error())
		return
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	var h proto.Hello
	if err := proto.Read(conn, &h); err != nil {
		refuse("bad hello: " + err.Error())
		return
	}
	if h.Version != proto.Version {
		refuse(fmt.Sprintf("client speaks version %d, daemon %d", h.Version, proto.Version))
		return
	}
	c.cmd = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, h.Command)
	if len(c.cmd) > 120 {
		c.cmd = c.cmd[:120]
	}
	// The port exists before the client is registered: from then on the
	// steering and Close may use it.
	props := d.up.Link.Props()
	port, fds, err := shm.NewPort(shm.Config{MTU: props.MTU, Ring: d.cfg.Ring})
	if err != nil {
		refuse("port: " + err.Error())
		return
	}
	c.port = port
	why := ""
	d.mu.Lock()
	switch {
	case d.closed:
		why = "daemon closing"
	case len(d.clients) >= d.cfg.MaxClients:
		why = fmt.Sprintf("daemon serves its limit of %d clients", d.cfg.MaxClients)
	case !d.takeBlock(c):
		why = "no free QPN range"
	default:
		c.id = d.nextID
		d.nextID++
		d.clients[c.id] = c
	}
	d.mu.Unlock()
	if why != "" {
		fds.Close()
		port.Close()
		refuse(why)
		return
	}
	if err := d.welcome(c, fds); err != nil {
		d.log.Warn("client lost during the handshake", "pid", c.pid, "err", err)
		d.release(c)
		return
	}
	conn.SetDeadline(time.Time{})
	d.log.Info("client attached", "client", c.id, "pid", c.pid, "uid", c.uid, "gid", c.gid, "command", c.cmd,
		"qpns", fmt.Sprintf("%#x..%#x", c.first, c.last))
	go c.watch()
	c.serve()
}

// welcome tells the client its QPNs and the link and passes it the other
// end of its port (fds, closed here in any case).
func (d *Daemon) welcome(c *client, fds *shm.PortFds) error {
	props := d.up.Link.Props()
	w := &proto.Welcome{Version: proto.Version, Client: c.id, Interface: d.up.Name, MTU: props.MTU,
		Link: props.Name, SrcPort: props.SrcPort, Synthetic: props.SyntheticHeaders,
		QPNFirst: c.first, QPNLast: c.last, MaxMRs: d.cfg.MaxMRs, CommFirst: c.commFirst, CommLast: c.commLast}
	if len(d.up.HWAddr) == 6 {
		w.HWAddr = d.up.HWAddr.String()
	}
	for _, a := range d.up.Addrs {
		w.Addrs = append(w.Addrs, a.String())
	}
	if err := proto.Write(c.conn, w); err != nil {
		fds.Close()
		return err
	}
	return shm.SendPort(c.conn, fds)
}

// watch serves the client's requests (control_linux.go) and ends the
// client when its connection closes (the process exited or gave up the
// device).
func (c *client) watch() {
	b := make([]byte, maxRequest)
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := c.conn.ReadMsgUnix(b, oob)
		if err == nil {
			err = proto.Write(c.conn, c.d.control(c, b[:n], receivedFDs(oob[:oobn])))
		}
		if err != nil {
			c.end()
			return
		}
	}
}

// receivedFDs are the descriptors a request carried (SCM_RIGHTS).
func receivedFDs(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	var fds []int
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// end stops the client: its connection closes and serve, woken, returns
// and releases it. The port is closed by release, once serve reads no
// frame lent from it: closing it here, from the watch goroutine or Close,
// unmapped frames serve was still steering (the daemon died with SIGSEGV
// in egress.push).
func (c *client) end() {
	c.endOnce.Do(func() {
		c.ending.Store(true)
		c.conn.Close()
		c.port.Wake()
	})
}

// serve reads the client's frames and steers them until the port ends.
func (c *client) serve() {
	d := c.d
	defer d.release(c)
	rx := c.rx[:]
	for !c.ending.Load() {
		n, err := c.port.Receive(rx)
		if err != nil {
			break
		}
		c.wire.want = n
		for i := range n {
			d.fromClient(c, rx[i])
		}
		c.endBatch()
		if n == len(rx) {
			continue
		}
		if err := c.port.Wait(-1); err != nil {
			if !errors.Is(err, link.ErrClosed) {
				d.log.Warn("client port", "client", c.id, "err", err)
			}
			break
		}
	}
}

// endBatch sends c's frames to the wire and signals the clients its batch
// queued placement messages to.
func (c *client) endBatch() {
	c.d.eg.flush(&c.wire, c.d.up.Link, &c.d.st)
	c.kick()
}

// release forgets c: its QPN block becomes free, its port and connection
// close.
func (d *Daemon) release(c *client) {
	c.end()
	c.port.Close()   // serve has returned (or never ran): nothing reads its frames
	d.revokePeers(c) // before its QPN block can go to another client
	d.mu.Lock()
	if d.clients[c.id] == c {
		delete(d.clients, c.id)
	}
	if d.owners[c.block].Load() == c {
		d.owners[c.block].Store(nil)
	}
	d.mu.Unlock()
	d.forgetConns(c) // after its block is free: no registration names it from then on
	d.dropServices(c)
	d.dropGroups(c)
	d.dropRegions(c)
	// A steering goroutine that loaded c before the store may still call
	// deliver: the port is closed by then and takes nothing.
	if c.id != 0 {
		d.log.Info("client detached", "client", c.id, "pid", c.pid, "frames_from", c.fromClient.Load(),
			"frames_to", c.toClient.Load(), "foreign_qpn", c.dropForeign.Load(), "foreign_conn", c.dropConn.Load(), "bad_source", c.dropBadSource.Load(),
			"malformed", c.dropMalformed.Load(), "overflow", c.overflow.Load())
	}
}

// deliver copies frame into c's port; hdr, when not nil, replaces the
// frame's first len(hdr) bytes (the private copy its header was read from).
// The port's SendCopy keeps the port mapped while it writes: the client may
// detach (release closes the port) at any moment.
func (c *client) deliver(frame, hdr []byte) {
	c.deliverQueued(frame, hdr)
}

// deliverQueued is deliver reporting whether the frame was queued.
func (c *client) deliverQueued(frame, hdr []byte) bool {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	queued, err := c.port.SendCopy(frame, hdr)
	switch {
	case queued:
		c.toClient.Add(1)
	case err == nil:
		c.overflow.Add(1) // no free buffer, a frame too long, or the ring full
	}
	return queued
}
