package stat

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An Entry is one stat socket found in the directory.
type Entry struct {
	Path   string
	PID    int
	NetNS  uint64
	Device string
}

// parseName reads PID.NETNS.IFNAME.sock (interface names may hold dots).
func parseName(name string) (Entry, bool) {
	base, ok := strings.CutSuffix(name, ".sock")
	if !ok {
		return Entry{}, false
	}
	parts := strings.SplitN(base, ".", 3)
	if len(parts) != 3 || parts[2] == "" {
		return Entry{}, false
	}
	pid, err1 := strconv.Atoi(parts[0])
	ns, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return Entry{}, false
	}
	return Entry{PID: pid, NetNS: ns, Device: parts[2]}, true
}

// alive reports whether a process with the PID exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// List returns the stat sockets in dir of live processes, by PID and
// device. It removes the sockets of processes that are gone (when it may).
// A missing directory means no sockets.
func List(dir string) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []Entry
	for _, de := range des {
		e, ok := parseName(de.Name())
		if !ok || de.Type()&os.ModeSocket == 0 {
			continue
		}
		e.Path = filepath.Join(dir, de.Name())
		if !alive(e.PID) {
			_ = os.Remove(e.Path)
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].Device < out[j].Device
	})
	return out, nil
}

// ErrStale is returned (wrapped) by Query for a socket nobody listens on
// (its process ended without removing it, or the PID was reused); Query
// removes it.
var ErrStale = errors.New("stale stat socket")

// Query asks the stat socket at path for its reply, per-queue-pair counters
// included when perQP is set, within timeout.
func Query(path string, perQP bool, timeout time.Duration) (*Reply, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(path)
			return nil, fmt.Errorf("%s: %w", path, ErrStale)
		}
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	req := "\n"
	if perQP {
		req = "qp\n"
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var r Reply
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: reading the reply: %w", path, err)
	}
	if r.Snapshot == nil {
		return nil, fmt.Errorf("%s: reply without counters", path)
	}
	return &r, nil
}
