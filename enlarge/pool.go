package enlarge

import (
	"fmt"
	"sync"
)

// Pool is registered staging memory for eager sends, shared by every channel
// whose transport is in the same protection domain (as MPI libraries share a
// pool of registered send buffers). A channel takes a slot for each eager
// message it sends from its small ring and gives it back when the send
// completes, so the pool's cost per connection is its size divided by the
// number of connections. A channel gives its slots back when it next runs
// (any Send, Recv or Progress call polls its completions), so a program must
// not leave a channel that has sent unattended for long while others wait for
// slots. A channel that has been promoted sends from its own large buffer
// instead. Safe for concurrent use.
type Pool struct {
	mu     sync.Mutex
	t      Transport
	r      Region
	size   int
	free   []int32
	closed bool
}

// NewPool registers slots × slotSize bytes through t.
func NewPool(t Transport, slots, slotSize int) (*Pool, error) {
	if slots < 1 || slots > 1<<20 || slotSize < 1 || slotSize > 1<<24 {
		return nil, fmt.Errorf("enlarge: new pool: %d slots of %d B: %w", slots, slotSize, ErrConfig)
	}
	r, err := t.Register(slots * slotSize)
	if err != nil {
		return nil, fmt.Errorf("enlarge: new pool: %w", err)
	}
	p := &Pool{t: t, r: r, size: slotSize, free: make([]int32, slots)}
	for i := range p.free {
		p.free[i] = int32(slots - 1 - i)
	}
	return p, nil
}

// SlotSize is the size of one slot.
func (p *Pool) SlotSize() int { return p.size }

// RegisteredBytes is the size of the pool's registered memory.
func (p *Pool) RegisteredBytes() int { return len(p.r.Bytes()) }

// Free is the number of slots not in use.
func (p *Pool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

func (p *Pool) get() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.free) == 0 {
		return 0, false
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return int(i), true
}

func (p *Pool) put(i int) {
	p.mu.Lock()
	p.free = append(p.free, int32(i))
	p.mu.Unlock()
}

func (p *Pool) slot(i int) []byte { return p.r.Bytes()[i*p.size : (i+1)*p.size] }

// Close deregisters the pool. Channels using it must be closed first.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	return p.t.Deregister(p.r)
}
