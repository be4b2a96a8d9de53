// Package proto is the conversation between the xdproce daemon and its
// clients on the daemon's unix socket (SOCK_SEQPACKET, one message per
// packet): the client sends a Hello (JSON), the daemon answers a Welcome
// (JSON) and, when it accepted the client, a second message carrying the
// client's link/shm port (shm.SendPort). The connection then stays open
// for the client's life; either side closing it ends the client. On it the
// client asks for what the daemon owns device-wide (Call: a Request, one
// Reply each, in turn): RDMA CM service IDs, multicast groups, shared
// memory, and tells it whom its connected queue pairs talk to.
package proto

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link/shm"
)

// Version is the version of the conversation.
const Version = 4 // 4: connected queue pairs (connqp, disconnqp); 3: placement grants (placekey, revokeqp)

// maxMessage bounds one JSON message.
const maxMessage = 64 << 10

// Hello is the client's first message.
type Hello struct {
	Version int    `json:"version"`
	Command string `json:"command"` // what the client runs, for the daemon's log
}

// Welcome is the daemon's answer. Error is set when the client is refused;
// nothing else is then.
type Welcome struct {
	Version   int      `json:"version"`
	Error     string   `json:"error,omitempty"`
	Client    int      `json:"client"`    // the daemon's number for this client
	Interface string   `json:"interface"` // the interface the daemon serves
	HWAddr    string   `json:"hwaddr"`    // its MAC address
	Addrs     []string `json:"addrs"`     // its IP addresses (the GIDs' source)
	MTU       int      `json:"mtu"`       // the L3 MTU of the daemon's link and of the port
	Link      string   `json:"link"`      // what carries the frames on the wire: "AF_XDP (native)", "UDP"
	SrcPort   uint16   `json:"src_port"`  // link.Props.SrcPort of the daemon's link
	Synthetic bool     `json:"synthetic"` // link.Props.SyntheticHeaders of the daemon's link
	QPNFirst  uint32   `json:"qpn_first"` // the client's QPNs: QPNFirst..QPNLast
	QPNLast   uint32   `json:"qpn_last"`
	MaxMRs    int      `json:"max_mrs"` // the client's limit on memory regions (0: the default)
	// CommFirst..CommLast are the RDMA CM communication IDs (and SIDR
	// request IDs) the client's QP1 may use: the daemon steers the MADs
	// that name one to it.
	CommFirst uint32 `json:"comm_first"`
	CommLast  uint32 `json:"comm_last"`
}

// The operations of a Request.
const (
	OpListen   = "listen"   // take RDMA CM service ID ServiceID: its REQs and SIDR_REQs come to this client
	OpUnlisten = "unlisten" // give ServiceID back
	OpJoin     = "join"     // join the multicast group (or IPv4 broadcast address) Group on the interface
	OpLeave    = "leave"    // leave Group
	// OpRegMem shares a memory region with the daemon for direct
	// placement: the message carries one sealed memfd (CallFD); the reply
	// names the region (Reply.Region).
	OpRegMem   = "regmem"
	OpDeregMem = "deregmem" // forget Region: the daemon unmaps it before it answers
	// OpPlaceKey registers RKey of Region (PD, Access; Len bytes of the
	// region from Off, addressed from VA), so the daemon can place WRITEs
	// and READs on it on the first hop; deregmem forgets it.
	OpPlaceKey = "placekey"
	// OpRevokeQP forgets the placement grant of QPN: when it is answered
	// the daemon places nothing more for that queue pair on its own.
	OpRevokeQP = "revokeqp"
	// OpConnQP registers the client's RC or UC queue pair QPN as
	// connected to queue pair PeerQPN at GID: from then on the daemon
	// passes another local client's RC/UC frames to QPN only when they
	// come from that client's queue pair PeerQPN at GID. Registering a
	// QPN again replaces its peer.
	OpConnQP = "connqp"
	// OpDisconnQP forgets QPN's peer (the queue pair was reset or
	// destroyed): no local client's RC/UC frame reaches it from then on.
	// A QPN not registered is no error.
	OpDisconnQP = "disconnqp"
)

// Request is a client's request after the handshake.
type Request struct {
	Op        string `json:"op"`
	ServiceID uint64 `json:"service_id,omitempty"`
	Group     string `json:"group,omitempty"`
	Region    uint32 `json:"region,omitempty"`
	RKey      uint32 `json:"rkey,omitempty"`
	PD        uint32 `json:"pd,omitempty"`
	Access    uint32 `json:"access,omitempty"`
	VA        uint64 `json:"va,omitempty"`
	Off       uint64 `json:"off,omitempty"`
	Len       uint64 `json:"len,omitempty"`
	QPN       uint32 `json:"qpn,omitempty"`
	GID       string `json:"gid,omitempty"`      // OpConnQP: the peer's GID (an IP address)
	PeerQPN   uint32 `json:"peer_qpn,omitempty"` // OpConnQP: the peer's QPN
}

// Reply answers a Request: Error is empty when it was done.
type Reply struct {
	Error  string `json:"error,omitempty"`
	Region uint32 `json:"region,omitempty"` // OpRegMem: the region's number in placement messages
}

// Call sends r on the daemon connection c and waits for the reply, at most
// timeout; a refusal is an error carrying the daemon's reason. Calls on one
// connection must not overlap.
func Call(c *net.UnixConn, r *Request, timeout time.Duration) error {
	_, err := CallFD(c, r, -1, timeout)
	return err
}

// CallFD is Call passing the descriptor fd with the request (SCM_RIGHTS;
// none when fd < 0); it returns the reply.
func CallFD(c *net.UnixConn, r *Request, fd int, timeout time.Duration) (*Reply, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return nil, err
	}
	var rep Reply
	if err := Read(c, &rep); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return &rep, errors.New(rep.Error)
	}
	return &rep, nil
}

// Write sends v as one JSON message.
func Write(c *net.UnixConn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(b)
	return err
}

// Read reads one JSON message into v.
func Read(c *net.UnixConn, v any) error {
	buf := make([]byte, maxMessage)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		return fmt.Errorf("malformed message: %w", err)
	}
	return nil
}

// Dial connects to the daemon at path, says hello and returns the
// connection (to keep open while the port is in use), the daemon's welcome
// and the client's end of the port. The handshake is bounded by timeout.
func Dial(path, command string, timeout time.Duration) (*net.UnixConn, *Welcome, *shm.Link, error) {
	c, err := net.DialTimeout("unixpacket", path, timeout)
	if err != nil {
		return nil, nil, nil, err
	}
	uc := c.(*net.UnixConn)
	l, w, err := handshake(uc, command, timeout)
	if err != nil {
		uc.Close()
		return nil, nil, nil, err
	}
	return uc, w, l, nil
}

func handshake(c *net.UnixConn, command string, timeout time.Duration) (*shm.Link, *Welcome, error) {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if err := Write(c, &Hello{Version: Version, Command: command}); err != nil {
		return nil, nil, fmt.Errorf("hello: %w", err)
	}
	var w Welcome
	if err := Read(c, &w); err != nil {
		return nil, nil, fmt.Errorf("welcome: %w", err)
	}
	if w.Error != "" {
		return nil, nil, fmt.Errorf("refused: %s", w.Error)
	}
	if w.Version != Version {
		return nil, nil, fmt.Errorf("daemon speaks version %d, this client %d", w.Version, Version)
	}
	if w.QPNLast < w.QPNFirst || w.QPNFirst < 2 || w.QPNLast >= 0xFFFFFF {
		return nil, nil, fmt.Errorf("daemon gave the QPN range %#x..%#x", w.QPNFirst, w.QPNLast)
	}
	if w.CommLast < w.CommFirst || w.CommLast == 0 {
		return nil, nil, fmt.Errorf("daemon gave the communication ID range %#x..%#x", w.CommFirst, w.CommLast)
	}
	fds, err := shm.ReceivePort(c)
	if err != nil {
		return nil, nil, err
	}
	l, err := shm.Attach(fds)
	if err != nil {
		return nil, nil, err
	}
	return l, &w, nil
}

// ErrNoDaemon is wrapped when no daemon listens on a socket path.
var ErrNoDaemon = errors.New("no xdproce daemon")

// DefaultSocket is the socket path of the daemon for interface ifname in
// this thread's network namespace when --socket is not given:
// /run/xdproce/daemon-IFNAME-NETNS.sock for root, else under
// $XDG_RUNTIME_DIR/xdproce (or /tmp/xdproce-UID). NETNS is the namespace's
// inode number, so daemons of same-named interfaces in different
// namespaces do not collide.
func DefaultSocket(ifname string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("network namespace: %w", err)
	}
	dir := "/run/xdproce"
	if os.Geteuid() != 0 {
		if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
			dir = filepath.Join(rt, "xdproce")
		} else {
			dir = "/tmp/xdproce-" + strconv.Itoa(os.Geteuid())
		}
	}
	return filepath.Join(dir, "daemon-"+ifname+"-"+strconv.FormatUint(st.Ino, 10)+".sock"), nil
}
