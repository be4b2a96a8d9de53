package roce

import (
	"context"
	"fmt"

	"github.com/xdproce/xdproce/cm/rdmacm"
)

// cmPort names an rdma_cm port: its port space and number. The agent files
// its listeners under it (a *CMListener under RDMA_PS_TCP, a *SIDRListener
// under RDMA_PS_UDP).
type cmPort struct {
	ps   rdmacm.PortSpace
	port uint16
}

func (p cmPort) serviceID() uint64 { return rdmacm.ServiceID(p.ps, p.port) }

// cmRegistrar is told the service IDs a device listens on: the xdproce
// daemon, which steers their REQs and SIDR_REQs to the device
// (roce/daemon_linux.go).
type cmRegistrar interface {
	listenService(id uint64) error
	unlistenService(id uint64) error
}

// listen files l under p, after the daemon (if any) gave this device p's
// service ID.
func (a *cmAgent) listen(p cmPort, l any) error {
	a.listenMu.Lock()
	defer a.listenMu.Unlock()
	a.mu.Lock()
	inUse := a.listeners[p] != nil
	a.mu.Unlock()
	if inUse {
		return fmt.Errorf("port %d is in use", p.port)
	}
	if a.d.cmReg != nil {
		if err := a.d.cmReg.listenService(p.serviceID()); err != nil {
			return fmt.Errorf("port %d: %w", p.port, err)
		}
	}
	a.mu.Lock()
	a.listeners[p] = l
	a.mu.Unlock()
	return nil
}

// unlisten removes l from under p and gives the service ID back to the
// daemon (if any); a second call does nothing.
func (a *cmAgent) unlisten(p cmPort, l any) error {
	a.listenMu.Lock()
	defer a.listenMu.Unlock()
	a.mu.Lock()
	mine := a.listeners[p] == l
	if mine {
		delete(a.listeners, p)
	}
	a.mu.Unlock()
	if r := a.d.cmReg; mine && r != nil {
		if err := r.unlistenService(p.serviceID()); err != nil {
			return fmt.Errorf("port %d: %w", p.port, err)
		}
	}
	return nil
}

// backlog holds a listener's requests until Accept takes them.
type backlog[R interface{ Reject([]byte) error }] struct {
	reqs chan R
	done chan struct{}
}

// cmBacklog is how many requests wait for Accept before more are refused
// (REJ no resources, SIDR_REP reject): 1024, what Linux's rdma_ucm gives a
// listener that asks for no particular backlog (its max_backlog).
const cmBacklog = 1024

func newBacklog[R interface{ Reject([]byte) error }]() backlog[R] {
	return backlog[R]{reqs: make(chan R, cmBacklog), done: make(chan struct{})}
}

// full reports whether another request would not fit (only the agent's
// goroutine adds them, under its lock).
func (b *backlog[R]) full() bool { return len(b.reqs) == cap(b.reqs) }

// accept waits for the next request.
func (b *backlog[R]) accept(ctx context.Context) (R, error) {
	var zero R
	select {
	case r := <-b.reqs:
		return r, nil
	case <-b.done:
		return zero, fmt.Errorf("listener %w", errCMClosed)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// close ends Accept and rejects the requests not taken.
func (b *backlog[R]) close() {
	select {
	case <-b.done:
		return
	default:
		close(b.done)
	}
	for {
		select {
		case r := <-b.reqs:
			_ = r.Reject(nil)
		default:
			return
		}
	}
}
