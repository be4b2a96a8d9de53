package daemon

import (
	"net/netip"
	"sync"
	"time"
)

// neighTTL is how long a resolved MAC address is used before it is asked
// for again (the frame meanwhile still goes with the old one).
const neighTTL = 30 * time.Second

// neighbours fills in destination MAC addresses for clients that have no
// neighbour table for the daemon's link (those in another network
// namespace, reaching the daemon by its socket path, send zero MACs). A
// miss drops the frame (counted) and asks the resolver goroutine; the
// protocol's retransmission goes once the kernel has answered.
type neighbours struct {
	mu      sync.RWMutex
	m       map[[16]byte]neighEntry
	pending map[[16]byte]bool
	req     chan [16]byte
	done    chan struct{}
}

type neighEntry struct {
	mac [6]byte
	at  time.Time
}

func (n *neighbours) init() {
	n.m = map[[16]byte]neighEntry{}
	n.pending = map[[16]byte]bool{}
	n.req = make(chan [16]byte, 64)
	n.done = make(chan struct{})
}

// lookup copies the MAC for ip into mac and reports whether there was one;
// a missing or old entry is asked for.
func (n *neighbours) lookup(ip *[16]byte, mac []byte) bool {
	n.mu.RLock()
	e, ok := n.m[*ip]
	n.mu.RUnlock()
	if ok {
		copy(mac, e.mac[:])
	}
	if !ok || time.Since(e.at) > neighTTL {
		n.ask(ip)
	}
	return ok
}

func (n *neighbours) ask(ip *[16]byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[*ip] {
		return
	}
	select {
	case n.req <- *ip:
		n.pending[*ip] = true
	default: // the resolver is behind: a later frame asks again
	}
}

// resolver answers the requests with the uplink's resolver, one at a time,
// until the request channel closes.
func (d *Daemon) resolver() {
	n := &d.neigh
	defer close(n.done)
	for ip := range n.req {
		addr := netip.AddrFrom16(ip).Unmap()
		mac, err := d.up.Resolve(addr)
		n.mu.Lock()
		delete(n.pending, ip)
		if err == nil && len(mac) == 6 {
			n.m[ip] = neighEntry{mac: [6]byte(mac), at: time.Now()}
		}
		n.mu.Unlock()
		if err != nil {
			d.log.Warn("next hop not resolved", "dst", addr, "err", err)
		}
	}
}

// close ends the resolver and waits for it.
func (n *neighbours) close() {
	close(n.req)
	<-n.done
}
