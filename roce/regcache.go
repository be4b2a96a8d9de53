package roce

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Defaults of RegCacheConfig's zero fields.
const (
	DefaultRegCacheIdle       = 5 * time.Second
	DefaultRegCacheMaxEntries = 1024
	DefaultRegCacheMaxBytes   = 1 << 30
	DefaultRegCacheFragment   = 1 << 20
)

// RegCacheConfig tunes a RegCache. Zero fields take the defaults above.
type RegCacheConfig struct {
	// Access is the access of every region the cache registers; 0 means
	// LocalWrite|RemoteWrite|RemoteRead. A cache hands out regions of one
	// access only: use one cache per access set.
	Access Access
	// Idle is how long a released region stays registered unused before the
	// cache deregisters it (the seed's tunable idle threshold).
	Idle time.Duration
	// MaxEntries and MaxBytes bound the regions the cache holds, in use or
	// not; when a new region would pass either, the least recently released
	// idle regions are deregistered first.
	MaxEntries int
	MaxBytes   int64
	// Fragment is the granularity, in bytes (a power of two), of the index
	// that finds a registered region containing a buffer: each region is
	// listed under every Fragment-aligned span of addresses it touches, and
	// a Get that is not an exact repeat scans the regions listed under its
	// buffer's first byte. The default is 1 MiB rather than the seed's 16 MB
	// because Go's allocator packs buffers densely: a 16 MB span can list
	// hundreds of small regions.
	Fragment int
}

// RegCacheStats counts what a RegCache did.
type RegCacheStats struct {
	Hits    uint64 // Get found a registered region containing the buffer
	Misses  uint64 // Get registered a new region
	Expired uint64 // regions deregistered after Idle unused
	Evicted uint64 // idle regions deregistered to make room (MaxEntries, MaxBytes)
	Stale   uint64 // regions found deregistered behind the cache's back, dropped
	Entries int    // regions held now, in use or idle (registrations under way count)
	Bytes   int64  // their bytes
	InUse   int    // regions handed out and not yet released
}

// A RegCache keeps memory registrations alive after use so that transfers
// from and to the same buffers skip registering and deregistering them: the
// lazy deregistration of seed 002 (docs/contracts.md). Get returns a region
// containing the buffer, registering one on a miss, and a release function;
// a released region stays registered until it has been idle for Idle, until
// room is needed for another (least recently released first), or until
// Close. A region in use is never deregistered. All methods are safe for
// concurrent use.
//
// Where this departs from the seed, and why:
//   - The seed registers whole 16 MB fragments of the address space. A Go
//     program owns only the memory its slices cover (the collector may place
//     other objects right beside it), and a region with remote access would
//     expose whatever lies in the fragment to the peer, so the cache
//     registers exactly the buffer Get is given. Fragment survives as the
//     granularity of the lookup index (the seed's bit vector and hash table).
//   - The seed revalidates a mapping because a different shared-memory
//     segment may have been attached at the same address. Here the region
//     holds the buffer's slice, so the collector cannot free or reuse that
//     memory while the cache holds it: one address names one buffer for as
//     long as its entry lives. What Get validates is that the buffer lies
//     within the region (address and length: a buffer reallocated elsewhere,
//     or grown past the region, misses and is registered anew) and that the
//     region's keys are still in the device's table (a caller may have
//     deregistered it; the entry is then dropped and counted as Stale). The
//     price is that the cache keeps idle buffers from being collected until
//     it lets them go: MaxBytes bounds that. (Memory from syscall.Mmap is
//     outside the collector: unmapping it while a region covers it is the
//     caller's error, as with RegMR.)
//   - The seed's idle counter is bumped by a once-a-second tick. Here each
//     idle region remembers when it was released; Get and release
//     deregister the expired ones they come across, and a timer, armed only
//     while idle regions exist, for when the oldest expires, does it when
//     nobody calls. An idle cache wakes nobody.
//   - The seed's use count, raised per bulk transfer and lowered when the
//     RDMA operation completes, is Get and release.
//
// What it saves is smaller here than on hardware: registering a region
// pins and maps nothing (the engine reads and writes the slice), so a miss
// costs a key draw, table updates and allocations (well under a
// microsecond, docs/status.md), and a hit a lock, a map lookup and the
// table check.
//
// A region may be larger than the buffer Get was given (a sub-slice of a
// registered buffer hits its region); a peer given its rkey reaches all of
// it. Regions handed out belong to the cache: do not Deregister them.
type RegCache struct {
	pd     *PD
	cfg    RegCacheConfig
	shift  uint
	now    func() time.Duration
	timers bool // false when the clock is injected: tests call Sweep

	mu      sync.Mutex
	exact   map[regSpan]*regEntry
	frags   map[uintptr][]*regEntry
	idle    regList // released regions, most recently released first
	entries int     // regions in the index, plus registrations under way
	bytes   int64
	inUse   int
	timer   *time.Timer
	armed   bool
	closed  bool
	st      RegCacheStats
}

type regSpan struct {
	base uintptr
	n    int
}

type regEntry struct {
	mr         *MR
	span       regSpan
	users      int
	last       time.Duration // clock reading at the last release
	prev, next *regEntry     // in RegCache.idle, while users == 0 and cached
	cached     bool          // in the index; false once evicted or closed
	gone       bool          // deregistered behind the cache's back
}

// RegCache returns a registration cache over p.
func (p *PD) RegCache(cfg RegCacheConfig) (*RegCache, error) {
	start := time.Now()
	return p.newRegCache(cfg, func() time.Duration { return time.Since(start) }, true)
}

func (p *PD) newRegCache(cfg RegCacheConfig, now func() time.Duration, timers bool) (*RegCache, error) {
	cfg.Access = cmp.Or(cfg.Access, LocalWrite|RemoteWrite|RemoteRead)
	cfg.Idle = cmp.Or(cfg.Idle, DefaultRegCacheIdle)
	cfg.MaxEntries = cmp.Or(cfg.MaxEntries, DefaultRegCacheMaxEntries)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultRegCacheMaxBytes)
	cfg.Fragment = cmp.Or(cfg.Fragment, DefaultRegCacheFragment)
	switch {
	case cfg.Idle < 0:
		return nil, fmt.Errorf("roce: reg cache: idle %v is negative", cfg.Idle)
	case cfg.MaxEntries < 0 || cfg.MaxBytes < 0:
		return nil, fmt.Errorf("roce: reg cache: negative bound (max entries %d, max bytes %d)", cfg.MaxEntries, cfg.MaxBytes)
	case cfg.Fragment < 0 || cfg.Fragment&(cfg.Fragment-1) != 0:
		return nil, fmt.Errorf("roce: reg cache: fragment %d is not a power of two", cfg.Fragment)
	}
	return &RegCache{
		pd:     p,
		cfg:    cfg,
		shift:  uint(bits.TrailingZeros(uint(cfg.Fragment))),
		now:    now,
		timers: timers,
		exact:  make(map[regSpan]*regEntry),
		frags:  make(map[uintptr][]*regEntry),
	}, nil
}

// Get returns a registered region containing buf, with the cache's access,
// and the function that releases it once the work requests using it have
// completed; until then the region stays registered whatever happens
// (Idle, bounds, Close). Release may be called more than once; calls after
// the first do nothing. Get fails on an empty buffer, on a closed cache
// (ErrClosed), when making room would deregister a region in use or buf
// alone is larger than MaxBytes (ErrLimit), and as RegMR does.
func (c *RegCache) Get(buf []byte) (*MR, func(), error) {
	if len(buf) == 0 {
		return nil, nil, errors.New("roce: reg cache: get: empty buffer")
	}
	sp := regSpan{base: uintptr(unsafe.Pointer(unsafe.SliceData(buf))), n: len(buf)}
	now := c.now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("roce: reg cache: get: %w", ErrClosed)
	}
	drop := c.expireLocked(now, nil)
	e := c.hitLocked(sp)
	if e != nil {
		c.st.Hits++
		c.mu.Unlock()
		c.deregister(drop)
		return e.mr, c.releaser(e), nil
	}
	c.st.Misses++
	drop, err := c.reserveLocked(sp.n, drop)
	c.mu.Unlock()
	c.deregister(drop)
	if err != nil {
		return nil, nil, err
	}
	// Registering is the slow part: do it without the lock, with room
	// reserved so that concurrent misses cannot pass the bounds.
	m, err := c.pd.RegMR(buf, c.cfg.Access)
	c.mu.Lock()
	c.entries--
	c.bytes -= int64(sp.n)
	if err == nil && c.closed {
		err = fmt.Errorf("roce: reg cache: get: %w", ErrClosed)
	}
	if err != nil {
		c.mu.Unlock()
		if m != nil {
			_ = m.Deregister()
		}
		return nil, nil, err
	}
	if e = c.hitLocked(sp); e != nil {
		// Another Get registered a region containing buf meanwhile: use
		// it (still a miss: this Get paid for a registration).
		c.mu.Unlock()
		_ = m.Deregister()
		return e.mr, c.releaser(e), nil
	}
	e = &regEntry{mr: m, span: sp, users: 1, cached: true}
	c.insertLocked(e)
	c.inUse++
	c.mu.Unlock()
	return m, c.releaser(e), nil
}

// hitLocked finds a live region containing sp and takes a use of it.
func (c *RegCache) hitLocked(sp regSpan) *regEntry {
	for {
		e := c.lookupLocked(sp)
		if e == nil {
			return nil
		}
		if !c.registered(e) {
			c.st.Stale++
			e.gone = true
			c.removeLocked(e)
			continue
		}
		if e.users == 0 {
			c.idle.remove(e)
		}
		e.users++
		c.inUse++
		return e
	}
}

// lookupLocked returns a cached region containing sp, or nil.
func (c *RegCache) lookupLocked(sp regSpan) *regEntry {
	if e := c.exact[sp]; e != nil {
		return e
	}
	for _, e := range c.frags[sp.base>>c.shift] {
		if e.span.base <= sp.base && e.span.n >= sp.n && sp.base-e.span.base <= uintptr(e.span.n-sp.n) {
			return e
		}
	}
	return nil
}

// registered reports whether e's region is still in the device's table.
func (c *RegCache) registered(e *regEntry) bool {
	_, err := c.pd.d.tbl.Local(c.pd.pd, e.mr.LKey(), e.mr.Addr(), 0, 0)
	return err == nil
}

// reserveLocked makes room for a region of n bytes, evicting the least
// recently released idle regions onto drop, and counts it in entries and
// bytes.
func (c *RegCache) reserveLocked(n int, drop []*regEntry) ([]*regEntry, error) {
	if int64(n) > c.cfg.MaxBytes {
		return drop, fmt.Errorf("roce: reg cache: get: %d bytes, more than max bytes %d: %w", n, c.cfg.MaxBytes, ErrLimit)
	}
	for c.entries+1 > c.cfg.MaxEntries || c.bytes+int64(n) > c.cfg.MaxBytes {
		e := c.idle.tail
		if e == nil {
			return drop, fmt.Errorf("roce: reg cache: get: %d regions of %d bytes in use, no room for %d more bytes: %w",
				c.entries, c.bytes, n, ErrLimit)
		}
		c.st.Evicted++
		c.removeLocked(e)
		drop = append(drop, e)
	}
	c.entries++
	c.bytes += int64(n)
	return drop, nil
}

func (c *RegCache) insertLocked(e *regEntry) {
	c.exact[e.span] = e
	for f := e.span.base >> c.shift; f <= (e.span.base+uintptr(e.span.n)-1)>>c.shift; f++ {
		c.frags[f] = append(c.frags[f], e)
	}
	c.entries++
	c.bytes += int64(e.span.n)
}

// removeLocked takes e out of the index (and the idle list).
func (c *RegCache) removeLocked(e *regEntry) {
	if c.exact[e.span] == e {
		delete(c.exact, e.span)
	}
	for f := e.span.base >> c.shift; f <= (e.span.base+uintptr(e.span.n)-1)>>c.shift; f++ {
		l := c.frags[f]
		for i, x := range l {
			if x == e {
				l[i] = l[len(l)-1]
				l[len(l)-1] = nil
				l = l[:len(l)-1]
				break
			}
		}
		if len(l) == 0 {
			delete(c.frags, f)
		} else {
			c.frags[f] = l
		}
	}
	if e.users == 0 {
		c.idle.remove(e)
	}
	e.cached = false
	c.entries--
	c.bytes -= int64(e.span.n)
}

// regUse is one Get's hold on a region.
type regUse struct {
	c    *RegCache
	e    *regEntry
	done atomic.Bool
}

func (c *RegCache) releaser(e *regEntry) func() {
	u := &regUse{c: c, e: e}
	return u.release
}

func (u *regUse) release() {
	if u.done.CompareAndSwap(false, true) {
		u.c.put(u.e)
	}
}

func (c *RegCache) put(e *regEntry) {
	now := c.now()
	c.mu.Lock()
	e.users--
	c.inUse--
	var drop []*regEntry
	if e.users == 0 {
		if e.cached {
			e.last = now
			c.idle.pushFront(e)
		} else if !e.gone {
			drop = append(drop, e) // evicted from the cache while in use (Close)
		}
	}
	drop = c.expireLocked(now, drop)
	c.armLocked(now)
	c.mu.Unlock()
	c.deregister(drop)
}

// expireLocked moves the idle regions released at least Idle ago onto drop.
func (c *RegCache) expireLocked(now time.Duration, drop []*regEntry) []*regEntry {
	for e := c.idle.tail; e != nil && now-e.last >= c.cfg.Idle; e = c.idle.tail {
		c.st.Expired++
		c.removeLocked(e)
		drop = append(drop, e)
	}
	return drop
}

// armLocked sets the timer for the oldest idle region's expiry, unless it is
// set already.
func (c *RegCache) armLocked(now time.Duration) {
	if !c.timers || c.armed || c.closed || c.idle.tail == nil {
		return
	}
	d := c.idle.tail.last + c.cfg.Idle - now
	c.armed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.tick)
	} else {
		c.timer.Reset(d)
	}
}

func (c *RegCache) tick() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	c.Sweep()
}

// Sweep deregisters the regions idle for Idle or longer now, as Get, release
// and the cache's timer do on their own.
func (c *RegCache) Sweep() {
	now := c.now()
	c.mu.Lock()
	drop := c.expireLocked(now, nil)
	c.armLocked(now)
	c.mu.Unlock()
	c.deregister(drop)
}

// deregister deregisters regions already out of the index. The only way it
// can fail is a caller's Deregister of a region the cache handed out, which
// Get would have counted as Stale: count it so.
func (c *RegCache) deregister(drop []*regEntry) {
	stale := 0
	for _, e := range drop {
		if err := e.mr.Deregister(); err != nil {
			stale++
		}
	}
	if stale > 0 {
		c.mu.Lock()
		c.st.Stale += uint64(stale)
		c.mu.Unlock()
	}
}

// Stats returns the cache's counters.
func (c *RegCache) Stats() RegCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Entries, st.Bytes, st.InUse = c.entries, c.bytes, c.inUse
	return st
}

// Close deregisters every idle region now and makes later Gets fail with
// ErrClosed. It does not deregister a region in use: each is deregistered
// when its last user releases it, and Close then returns an error wrapping
// ErrBusy that counts them (the PD cannot be deallocated before those
// releases). Close may be called again; it returns nil once no region is in
// use.
func (c *RegCache) Close() error {
	c.mu.Lock()
	var drop []*regEntry
	if !c.closed {
		c.closed = true
		if c.timer != nil {
			c.timer.Stop()
		}
		// Get never inserts a span already cached, so exact lists every
		// region once.
		for _, e := range c.exact {
			users := e.users
			c.removeLocked(e)
			if users == 0 {
				drop = append(drop, e)
			}
		}
	}
	inUse := c.inUse
	c.mu.Unlock()
	c.deregister(drop)
	if inUse > 0 {
		return fmt.Errorf("roce: reg cache: close: %d regions in use, each deregistered at its release: %w", inUse, ErrBusy)
	}
	return nil
}

// regList is a doubly linked list of idle regions.
type regList struct{ head, tail *regEntry }

func (l *regList) pushFront(e *regEntry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	} else {
		l.tail = e
	}
	l.head = e
}

func (l *regList) remove(e *regEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}
