package stat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// EnvDir names the environment variable that overrides the socket
// directory.
const EnvDir = "XDPROCE_RUN_DIR"

// Dir returns the directory of the stat sockets: $XDPROCE_RUN_DIR, else
// /run/xdproce for root, else $XDG_RUNTIME_DIR/xdproce. Without any of them
// (a non-root process with no XDG_RUNTIME_DIR) there is none, and the error
// says so.
func Dir() (string, error) { return dirFor(os.Geteuid(), os.Getenv) }

func dirFor(euid int, getenv func(string) string) (string, error) {
	if d := getenv(EnvDir); d != "" {
		return d, nil
	}
	if euid == 0 {
		return "/run/xdproce", nil
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "xdproce"), nil
	}
	return "", errors.New("XDG_RUNTIME_DIR is not set (nor " + EnvDir + ")")
}

// A Source is what a stat socket reports: *roce.Device is one.
type Source interface {
	Snapshot(perQP bool) *roce.Snapshot
}

// Reply is what a stat socket answers: the process, its network namespace
// and the device's snapshot.
type Reply struct {
	PID     int    `json:"pid"`
	Command string `json:"command"` // the xdproce subcommand: "serve", "bench", ...
	NetNS   uint64 `json:"netns"`   // inode of the process's network namespace
	*roce.Snapshot
}

// Server is one device's stat socket.
type Server struct {
	ln      *net.UnixListener
	path    string
	src     Source
	ifname  string
	pid     int
	command string
	netns   uint64
	wg      sync.WaitGroup
	once    sync.Once
}

// Listen opens the stat socket of src, a device on interface ifname, for the
// subcommand command, and serves it until Close.
func Listen(src Source, ifname, command string) (*Server, error) {
	dir, err := Dir()
	if err != nil {
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	ns, err := NetNS()
	if err != nil {
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	s := &Server{src: src, ifname: ifname, pid: os.Getpid(), command: command, netns: ns}
	s.path = filepath.Join(dir, socketName(s.pid, ns, ifname))
	// A file of this name is left by a process that had this PID before.
	_ = os.Remove(s.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(s.path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("stat socket: %w", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Path is the socket's file name.
func (s *Server) Path() string { return s.path }

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(c)
		}()
	}
}

// answer reads the request line and writes the reply.
func (s *Server) answer(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	snap := s.src.Snapshot(strings.TrimSpace(line) == "qp")
	if snap.Device == "" { // a device made by roce.NewDevice
		snap.Device = s.ifname
	}
	_ = json.NewEncoder(c).Encode(Reply{PID: s.pid, Command: s.command, NetNS: s.netns, Snapshot: snap})
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.ln.Close()
		s.wg.Wait()
	})
	return err
}

// NetNS returns the inode of the calling thread's network namespace.
func NetNS() (uint64, error) {
	fi, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("network namespace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("network namespace: no inode")
	}
	return st.Ino, nil
}

// socketName is PID.NETNS.IFNAME.sock.
func socketName(pid int, netns uint64, ifname string) string {
	return strconv.Itoa(pid) + "." + strconv.FormatUint(netns, 10) + "." + ifname + ".sock"
}
