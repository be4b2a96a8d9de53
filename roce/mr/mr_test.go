package mr_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
)

// seeded is a deterministic key source.
type seeded struct{ r *rand.ChaCha8 }

func newSeeded(seed byte) *seeded {
	var s [32]byte
	s[0] = seed
	return &seeded{rand.NewChaCha8(s)}
}
func (s *seeded) Read(p []byte) (int, error) { return s.r.Read(p) }

// constant returns the same bytes forever.
type constant byte

func (c constant) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

func TestKeysRandomUniqueNonZero(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	seen := map[uint32]bool{}
	var prev uint32
	sequential := 0
	for i := range 2000 {
		m, err := pd.Register(make([]byte, 8), mr.LocalWrite|mr.RemoteWrite)
		if err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
		for _, k := range []uint32{m.LKey(), m.RKey()} {
			if k == 0 {
				t.Fatalf("key 0 issued")
			}
		}
		if seen[m.RKey()] {
			t.Fatalf("rkey %#x issued twice", m.RKey())
		}
		seen[m.RKey()] = true
		if m.RKey() == prev+1 {
			sequential++
		}
		prev = m.RKey()
	}
	if sequential > 2 {
		t.Errorf("%d of 2000 rkeys follow their predecessor: keys look sequential", sequential)
	}
	if got := tbl.Len(); got != 2000 {
		t.Errorf("Len = %d, want 2000", got)
	}
}

func TestSeededKeysDeterministic(t *testing.T) {
	keys := func() []uint32 {
		tbl := mr.NewTable(mr.WithRand(newSeeded(7)))
		pd := tbl.AllocPD()
		var ks []uint32
		for range 5 {
			m, err := pd.Register(make([]byte, 1), 0)
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, m.LKey(), m.RKey())
		}
		return ks
	}
	a, b := keys(), keys()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded keys differ at %d: %#x vs %#x", i, a[i], b[i])
		}
	}
}

func TestRepeatingKeySource(t *testing.T) {
	tbl := mr.NewTable(mr.WithRand(constant(0x5a)))
	pd := tbl.AllocPD()
	if _, err := pd.Register(make([]byte, 1), 0); err != nil {
		t.Fatalf("first register: %v", err)
	}
	if _, err := pd.Register(make([]byte, 1), 0); err == nil {
		t.Fatal("second register with a constant key source succeeded")
	}
	tbl = mr.NewTable(mr.WithRand(constant(0)))
	if _, err := tbl.AllocPD().Register(make([]byte, 1), 0); err == nil {
		t.Fatal("register with an all-zero key source succeeded")
	}
}

func TestRemoteChecks(t *testing.T) {
	tbl := mr.NewTable(mr.WithRand(newSeeded(1)))
	pd := tbl.AllocPD()
	other := tbl.AllocPD()
	buf := []byte("0123456789abcdef")
	const iova = 0x1000
	m, err := pd.RegisterIOVA(buf, iova, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		pd   *mr.PD
		key  uint32
		va   uint64
		n    uint64
		need mr.Access
		want error
		data string
	}{
		{"whole", pd, m.RKey(), iova, 16, mr.RemoteRead, nil, "0123456789abcdef"},
		{"middle", pd, m.RKey(), iova + 4, 3, mr.RemoteWrite, nil, "456"},
		{"empty at end", pd, m.RKey(), iova + 16, 0, mr.RemoteWrite, nil, ""},
		{"lkey is not an rkey", pd, 0 /* set below */, iova, 1, mr.RemoteRead, mr.ErrInvalidKey, ""},
		{"zero key", pd, 0, iova, 1, mr.RemoteRead, mr.ErrInvalidKey, ""},
		{"other pd", other, m.RKey(), iova, 1, mr.RemoteRead, mr.ErrPDMismatch, ""},
		{"atomic not granted", pd, m.RKey(), iova, 8, mr.RemoteAtomic, mr.ErrAccess, ""},
		{"before start", pd, m.RKey(), iova - 1, 2, mr.RemoteRead, mr.ErrOutOfBounds, ""},
		{"past end", pd, m.RKey(), iova + 10, 7, mr.RemoteRead, mr.ErrOutOfBounds, ""},
		{"start past end", pd, m.RKey(), iova + 17, 0, mr.RemoteRead, mr.ErrOutOfBounds, ""},
		{"length wraps", pd, m.RKey(), iova + 8, math.MaxUint64 - 4, mr.RemoteRead, mr.ErrOutOfBounds, ""},
		{"va wraps", pd, m.RKey(), math.MaxUint64, 2, mr.RemoteRead, mr.ErrOutOfBounds, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if tc.name == "lkey is not an rkey" {
				key = m.LKey()
				if key == m.RKey() {
					t.Skip("lkey equals rkey by chance")
				}
			}
			b, err := tbl.Remote(tc.pd, nil, key, tc.va, tc.n, tc.need)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Remote: err = %v, want %v", err, tc.want)
			}
			if err == nil && string(b) != tc.data {
				t.Fatalf("Remote: got %q, want %q", b, tc.data)
			}
		})
	}
}

func TestLocalChecks(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	ro, err := pd.Register([]byte("read only"), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tbl.Local(pd, ro.LKey(), ro.Addr()+5, 4, 0)
	if err != nil || string(b) != "only" {
		t.Fatalf("Local read = %q, %v", b, err)
	}
	if _, err := tbl.Local(pd, ro.LKey(), ro.Addr(), 1, mr.LocalWrite); !errors.Is(err, mr.ErrAccess) {
		t.Fatalf("Local write into read-only region: %v, want ErrAccess", err)
	}
	if _, err := tbl.Local(pd, ro.RKey(), ro.Addr(), 1, 0); ro.RKey() != ro.LKey() && !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("Local with rkey: %v, want ErrInvalidKey", err)
	}
	// Writing through a returned slice writes the region, and cannot grow past it.
	rw := make([]byte, 8)
	m, _ := pd.Register(rw, mr.LocalWrite)
	w, err := tbl.Local(pd, m.LKey(), m.Addr()+2, 2, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(w, "xy")
	if cap(w) != 2 || !bytes.Equal(rw, []byte{0, 0, 'x', 'y', 0, 0, 0, 0}) {
		t.Fatalf("region after write = %q (cap %d)", rw, cap(w))
	}
}

func TestRegisterValidation(t *testing.T) {
	pd := mr.NewTable().AllocPD()
	for _, tc := range []struct {
		name   string
		buf    []byte
		iova   uint64
		access mr.Access
	}{
		{"empty", nil, 0, 0},
		{"remote write without local write", make([]byte, 1), 0, mr.RemoteWrite},
		{"atomic without local write", make([]byte, 8), 0, mr.RemoteAtomic},
		{"unknown flag", make([]byte, 1), 0, 1 << 9},
		{"iova wraps", make([]byte, 16), math.MaxUint64 - 7, 0},
	} {
		if _, err := pd.RegisterIOVA(tc.buf, tc.iova, tc.access); err == nil {
			t.Errorf("%s: register succeeded", tc.name)
		}
	}
}

func TestDeregisterInvalidatesAtOnce(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, err := pd.Register(make([]byte, 64), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr(), 64, mr.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr(), 1, mr.RemoteRead); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("Remote after deregister: %v, want ErrInvalidKey", err)
	}
	if _, err := tbl.Local(pd, m.LKey(), m.Addr(), 1, 0); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("Local after deregister: %v, want ErrInvalidKey", err)
	}
	if err := m.Deregister(); !errors.Is(err, mr.ErrDeallocated) {
		t.Fatalf("second deregister: %v, want ErrDeallocated", err)
	}
	if tbl.Len() != 0 {
		t.Fatalf("Len = %d after deregister", tbl.Len())
	}
}

func TestInvalidateRKey(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, _ := pd.Register(make([]byte, 8), mr.LocalWrite|mr.RemoteWrite|mr.RemoteInvalidate)
	if err := tbl.InvalidateRKey(tbl.AllocPD(), nil, m.RKey()); !errors.Is(err, mr.ErrPDMismatch) {
		t.Fatalf("invalidate from another pd: %v", err)
	}
	if err := tbl.InvalidateRKey(pd, nil, m.RKey()); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr(), 1, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("Remote after invalidate: %v", err)
	}
	if _, err := tbl.Local(pd, m.LKey(), m.Addr(), 1, mr.LocalWrite); err != nil {
		t.Fatalf("Local after invalidate: %v", err)
	}
	if err := tbl.InvalidateRKey(pd, nil, m.RKey()); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("second invalidate: %v, want ErrInvalidKey", err)
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
}

// An ordinary region (no RemoteInvalidate: ibv_reg_mr's kind) keeps its rkey:
// rxe refuses remote invalidation of it.
func TestInvalidateRKeyOrdinaryRegion(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, _ := pd.Register(make([]byte, 8), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
	if err := tbl.InvalidateRKey(pd, nil, m.RKey()); !errors.Is(err, mr.ErrAccess) {
		t.Fatalf("invalidate an ordinary region: %v, want ErrAccess", err)
	}
	if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr(), 8, mr.RemoteWrite); err != nil {
		t.Fatalf("Remote after a refused invalidate: %v", err)
	}
	if err := tbl.InvalidateRKey(pd, nil, 0); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("invalidate key 0: %v, want ErrInvalidKey", err)
	}
}

func TestLimitAndPDLifetime(t *testing.T) {
	tbl := mr.NewTable(mr.WithMaxMRs(3))
	pd := tbl.AllocPD()
	var ms []*mr.MR
	for range 3 {
		m, err := pd.Register(make([]byte, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	if _, err := pd.Register(make([]byte, 1), 0); !errors.Is(err, mr.ErrLimit) {
		t.Fatalf("fourth register: %v, want ErrLimit", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, mr.ErrBusy) {
		t.Fatalf("dealloc with regions: %v, want ErrBusy", err)
	}
	for _, m := range ms {
		if err := m.Deregister(); err != nil {
			t.Fatal(err)
		}
	}
	if err := pd.Hold(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); !errors.Is(err, mr.ErrBusy) {
		t.Fatalf("dealloc while held: %v, want ErrBusy", err)
	}
	pd.Release()
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); !errors.Is(err, mr.ErrDeallocated) {
		t.Fatalf("second dealloc: %v", err)
	}
	if _, err := pd.Register(make([]byte, 1), 0); !errors.Is(err, mr.ErrDeallocated) {
		t.Fatalf("register on released pd: %v", err)
	}
}

func TestConcurrentRegisterLookup(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	stable, _ := pd.Register(make([]byte, 4096), mr.LocalWrite|mr.RemoteRead)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if g%2 == 0 {
					m, err := pd.Register(make([]byte, 16), mr.LocalWrite)
					if err != nil {
						t.Error(err)
						return
					}
					if err := m.Deregister(); err != nil {
						t.Error(err)
						return
					}
				} else if _, err := tbl.Remote(pd, nil, stable.RKey(), stable.Addr()+uint64(i), 8, mr.RemoteRead); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if tbl.Len() != 1 {
		t.Fatalf("Len = %d, want 1", tbl.Len())
	}
}

func TestLookupsAllocateNothing(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, _ := pd.Register(make([]byte, 4096), mr.LocalWrite|mr.RemoteWrite)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr()+64, 1024, mr.RemoteWrite); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Local(pd, m.LKey(), m.Addr(), 64, mr.LocalWrite); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Remote(pd, nil, m.RKey()+1, m.Addr(), 1, mr.RemoteWrite); err == nil && m.RKey()+1 != m.LKey() {
			t.Fatal("wrong key accepted")
		}
	})
	if allocs != 0 {
		t.Fatalf("lookups allocate %v times per run", allocs)
	}
}

func TestAccessString(t *testing.T) {
	for a, want := range map[mr.Access]string{
		0:                                   "0",
		mr.LocalWrite | mr.RemoteRead:       "LOCAL_WRITE|REMOTE_READ",
		mr.RemoteAtomic | 1<<6:              "REMOTE_ATOMIC|0x40",
		mr.LocalWrite | mr.RemoteInvalidate: "LOCAL_WRITE|REMOTE_INVALIDATE",
	} {
		if got := a.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint32(a), got, want)
		}
	}
}

func BenchmarkRemoteLookup(b *testing.B) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	for range 1000 {
		pd.Register(make([]byte, 64), mr.LocalWrite)
	}
	m, _ := pd.Register(make([]byte, 1<<16), mr.LocalWrite|mr.RemoteWrite)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tbl.Remote(pd, nil, m.RKey(), m.Addr()+4096, 4096, mr.RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReleasedRKeysNotReissued(t *testing.T) {
	// A key source that offers the same few keys again and again.
	src := &cycle{keys: []uint32{0x1111, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666}}
	tbl := mr.NewTable(mr.WithRand(src), mr.WithRetiredKeys(2))
	pd := tbl.AllocPD()
	m, err := pd.Register(make([]byte, 8), 0) // lkey 0x1111, rkey 0x2222
	if err != nil {
		t.Fatal(err)
	}
	if m.RKey() != 0x2222 {
		t.Fatalf("rkey %#x", m.RKey())
	}
	must(t, m.Deregister())
	src.i = 0
	m2, err := pd.Register(make([]byte, 8), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m2.RKey() == 0x2222 {
		t.Fatal("a deregistered rkey was issued again")
	}
}

type cycle struct {
	keys []uint32
	i    int
}

func (c *cycle) Read(p []byte) (int, error) {
	k := c.keys[c.i%len(c.keys)]
	c.i++
	p[0], p[1], p[2], p[3] = byte(k), byte(k>>8), byte(k>>16), byte(k>>24)
	return 4, nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A Cache gives what the table gives: the same checks on a hit, and a key
// removed by Deregister or InvalidateRKey is refused through a cache that
// held it, as soon as the call returns.
func TestCacheFollowsTable(t *testing.T) {
	// A key source that offers 0x10 again after its region is gone: the
	// new region's lkey equals the old one's (lkeys are not retired).
	src := &cycle{keys: []uint32{0x10, 0x20, 0x10, 0x30, 0x40, 0x50}}
	tbl := mr.NewTable(mr.WithRand(src))
	pd := tbl.AllocPD()
	old, err := pd.RegisterIOVA([]byte("old region"), 0x1000, mr.LocalWrite|mr.RemoteWrite|mr.RemoteInvalidate)
	if err != nil {
		t.Fatal(err)
	}
	var rc, lc mr.Cache
	for range 2 { // a fill, then a hit
		if b, err := tbl.RemoteCached(&rc, pd, nil, old.RKey(), 0x1004, 6, mr.RemoteWrite); err != nil || string(b) != "region" {
			t.Fatalf("RemoteCached = %q, %v", b, err)
		}
		if _, err := tbl.RemoteCached(&rc, pd, nil, old.RKey(), 0x1004, 7, mr.RemoteWrite); !errors.Is(err, mr.ErrOutOfBounds) {
			t.Fatalf("RemoteCached past the end: %v", err)
		}
		if _, err := tbl.RemoteCached(&rc, pd, nil, old.RKey(), 0x1000, 8, mr.RemoteAtomic); !errors.Is(err, mr.ErrAccess) {
			t.Fatalf("RemoteCached without the right: %v", err)
		}
		if _, err := tbl.RemoteCached(&rc, tbl.AllocPD(), nil, old.RKey(), 0x1000, 1, mr.RemoteWrite); !errors.Is(err, mr.ErrPDMismatch) {
			t.Fatalf("RemoteCached from another pd: %v", err)
		}
		if b, err := tbl.LocalCached(&lc, pd, old.LKey(), 0x1000, 3, mr.LocalWrite); err != nil || string(b) != "old" {
			t.Fatalf("LocalCached = %q, %v", b, err)
		}
	}
	if _, err := tbl.RemoteCached(&rc, pd, nil, old.RKey()^1, 0x1000, 1, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("RemoteCached, other key: %v", err)
	}
	if _, err := tbl.RemoteCached(&rc, pd, nil, old.RKey(), 0x1000, 1, mr.RemoteWrite); err != nil {
		t.Fatalf("RemoteCached back to the key: %v", err)
	}

	if err := tbl.InvalidateRKey(pd, nil, old.RKey()); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.RemoteCached(&rc, pd, nil, old.RKey(), 0x1000, 1, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("RemoteCached after InvalidateRKey: %v", err)
	}
	if _, err := tbl.LocalCached(&lc, pd, old.LKey(), 0x1000, 1, mr.LocalWrite); err != nil {
		t.Fatalf("LocalCached after InvalidateRKey: %v", err)
	}

	if err := old.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.LocalCached(&lc, pd, old.LKey(), 0x1000, 1, 0); !errors.Is(err, mr.ErrInvalidKey) {
		t.Fatalf("LocalCached after Deregister: %v", err)
	}
	nw, err := pd.RegisterIOVA([]byte("new"), 0x1000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if nw.LKey() != old.LKey() {
		t.Fatalf("lkey %#x, want the old region's %#x again", nw.LKey(), old.LKey())
	}
	if b, err := tbl.LocalCached(&lc, pd, nw.LKey(), 0x1000, 3, 0); err != nil || string(b) != "new" {
		t.Fatalf("LocalCached of the new region = %q, %v", b, err)
	}
}

// A region deregistered by another goroutine is refused through a cache
// from then on (run under -race by scripts/race.sh).
func TestCacheConcurrentDeregister(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, _ := pd.Register(make([]byte, 4096), mr.LocalWrite|mr.RemoteWrite)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		m.Deregister()
	}()
	var c mr.Cache
	for {
		select {
		case <-gone:
			if _, err := tbl.RemoteCached(&c, pd, nil, m.RKey(), m.Addr(), 8, mr.RemoteWrite); !errors.Is(err, mr.ErrInvalidKey) {
				t.Fatalf("RemoteCached after Deregister returned: %v", err)
			}
			return
		default:
			tbl.RemoteCached(&c, pd, nil, m.RKey(), m.Addr(), 8, mr.RemoteWrite)
		}
	}
}

func TestCachedLookupsAllocateNothing(t *testing.T) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	m, _ := pd.Register(make([]byte, 4096), mr.LocalWrite|mr.RemoteWrite)
	var rc, lc mr.Cache
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := tbl.RemoteCached(&rc, pd, nil, m.RKey(), m.Addr()+64, 1024, mr.RemoteWrite); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.LocalCached(&lc, pd, m.LKey(), m.Addr(), 64, mr.LocalWrite); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("cached lookups allocate %v times per run", allocs)
	}
}

func BenchmarkRemoteLookupCached(b *testing.B) {
	tbl := mr.NewTable()
	pd := tbl.AllocPD()
	for range 1000 {
		pd.Register(make([]byte, 64), mr.LocalWrite)
	}
	m, _ := pd.Register(make([]byte, 1<<16), mr.LocalWrite|mr.RemoteWrite)
	var c mr.Cache
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tbl.RemoteCached(&c, pd, nil, m.RKey(), m.Addr()+4096, 4096, mr.RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}
