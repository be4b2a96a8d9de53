package reliability

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/link"
)

// hub is a two-ended in-memory link for the hostile-peer tests. The victim
// end's transmitted frames go to the peer end only when their destination QPN
// is the honest peer's; every other frame the victim sends is handed to tap
// (on the victim's engine goroutine, before Send returns) and dropped. Frames
// injected with inject reach the victim as if the peer had sent them.
type hub struct {
	victim, peer *hubEnd
	// honestQPN is the peer-side QPN whose frames the victim may send to the
	// peer device.
	honestQPN atomic.Uint32
	// tap sees every frame the victim sends elsewhere (the attacker's side).
	tap func(frame []byte)
}

const hubMTU = 1500

type hubEnd struct {
	h      *hub
	other  *hubEnd
	mac    net.HardwareAddr
	mu     sync.Mutex
	inbox  [][]byte
	pool   [][]byte // free transmit buffers
	notify chan struct{}
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once
	victim bool
}

var _ link.Link = (*hubEnd)(nil)

func newHub(tap func([]byte)) *hub {
	h := &hub{tap: tap}
	h.victim = newHubEnd(h, 0x0b, true)
	h.peer = newHubEnd(h, 0x0a, false)
	h.victim.other, h.peer.other = h.peer, h.victim
	return h
}

func newHubEnd(h *hub, mac byte, victim bool) *hubEnd {
	e := &hubEnd{
		h: h, mac: net.HardwareAddr{0x02, 0, 0, 0, 0x77, mac},
		notify: make(chan struct{}, 1), done: make(chan struct{}), victim: victim,
	}
	for range 256 {
		e.pool = append(e.pool, make([]byte, hubMTU+18))
	}
	return e
}

// deliver queues a copy of frame on e and wakes its reader.
func (e *hubEnd) deliver(frame []byte) {
	c := append([]byte(nil), frame...)
	e.mu.Lock()
	if len(e.inbox) < 8192 {
		e.inbox = append(e.inbox, c)
	}
	e.mu.Unlock()
	e.Wake()
}

// inject delivers frames to the victim as if the peer had sent them.
func (h *hub) inject(frames [][]byte) {
	e := h.victim
	e.mu.Lock()
	for _, f := range frames {
		e.inbox = append(e.inbox, append([]byte(nil), f...))
	}
	e.mu.Unlock()
	e.Wake()
}

func (e *hubEnd) Receive(frames [][]byte) (int, error) {
	if e.closed.Load() {
		return 0, link.ErrClosed
	}
	e.mu.Lock()
	n := copy(frames, e.inbox)
	rest := copy(e.inbox, e.inbox[n:])
	clear(e.inbox[rest:])
	e.inbox = e.inbox[:rest]
	e.mu.Unlock()
	return n, nil
}

func (e *hubEnd) Alloc(bufs [][]byte) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for n < len(bufs) && len(e.pool) > 0 {
		b := e.pool[len(e.pool)-1]
		e.pool = e.pool[:len(e.pool)-1]
		bufs[n] = b[:cap(b)]
		n++
	}
	return n
}

func (e *hubEnd) Free(bufs [][]byte) {
	e.mu.Lock()
	for _, b := range bufs {
		if b != nil {
			e.pool = append(e.pool, b[:cap(b)])
		}
	}
	e.mu.Unlock()
}

func (e *hubEnd) Send(frames [][]byte) error {
	if e.closed.Load() {
		return link.ErrClosed
	}
	for _, f := range frames {
		switch {
		case !e.victim:
			e.other.deliver(f)
		case destQPN(f) == e.h.honestQPN.Load():
			e.other.deliver(f)
		default:
			if e.h.tap != nil {
				e.h.tap(f)
			}
		}
	}
	e.Free(frames)
	return nil
}

// destQPN reads the BTH destination QPN of an untagged IPv4 RoCEv2 frame the
// device built (Ethernet 14 + IPv4 20 + UDP 8, then the BTH).
func destQPN(f []byte) uint32 {
	const bth = 14 + 20 + 8
	if len(f) < bth+8 || f[12] != 0x08 || f[13] != 0x00 {
		return 0
	}
	return uint32(f[bth+5])<<16 | uint32(f[bth+6])<<8 | uint32(f[bth+7])
}

func (e *hubEnd) Wait(timeout time.Duration) error {
	if e.closed.Load() {
		return link.ErrClosed
	}
	e.mu.Lock()
	ready := len(e.inbox) > 0
	e.mu.Unlock()
	if ready || timeout == 0 {
		return nil
	}
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-e.notify:
	case <-e.done:
		return link.ErrClosed
	case <-tc:
	}
	return nil
}

func (e *hubEnd) Wake() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *hubEnd) Props() link.Props {
	return link.Props{Name: "hub", MTU: hubMTU, MaxFrame: hubMTU + 18, HWAddr: append(net.HardwareAddr(nil), e.mac...)}
}

func (e *hubEnd) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		close(e.done)
	})
	return nil
}
