package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ConnLog records what a device tells the daemon of its connected queue
// pairs, with the queue pair's state at the time; Fail makes the next
// registration fail.
type ConnLog struct {
	d      *Device
	mu     sync.Mutex
	Events []string
	Fail   bool
}

// RecordConns makes d tell l what it would tell the daemon.
func RecordConns(d *Device) *ConnLog {
	l := &ConnLog{d: d}
	d.conns = l
	return l
}

func (l *ConnLog) state(qpn uint32) string {
	if e := l.d.lookup(qpn); e != nil {
		return e.q.State().String()
	}
	return "gone"
}

func (l *ConnLog) connectQP(qpn uint32, peer netip.Addr, peerQPN uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Events = append(l.Events, fmt.Sprintf("connect %#x to %v %#x in %s", qpn, peer, peerQPN, l.state(qpn)))
	if l.Fail {
		l.Fail = false
		return errors.New("refused")
	}
	return nil
}

func (l *ConnLog) disconnectQP(qpn uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Events = append(l.Events, fmt.Sprintf("disconnect %#x in %s", qpn, l.state(qpn)))
	return nil
}

// Take returns the events recorded since the last call.
func (l *ConnLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.Events
	l.Events = nil
	return ev
}
