package bufpool

import "testing"

func TestPool(t *testing.T) {
	var p Pool
	p.Init(4, 64)
	bufs := make([][]byte, 8)
	if n := p.Alloc(bufs); n != 4 || p.Free() != 0 {
		t.Fatalf("Alloc = %d, free %d; want 4, 0", n, p.Free())
	}
	for _, b := range bufs[:4] {
		if len(b) != 64 || cap(b) != 64 {
			t.Fatalf("buffer len %d cap %d, want 64", len(b), cap(b))
		}
	}
	if !p.Put(bufs[2][:10]) || p.Put(bufs[2]) {
		t.Fatal("Put of an outstanding buffer must succeed once, then fail")
	}
	if p.Put(make([]byte, 64)) || p.Put(bufs[1][1:]) || p.Put(nil) {
		t.Fatal("Put accepted a foreign, misaligned or nil buffer")
	}
	if n := p.Alloc(bufs[:1]); n != 1 || &bufs[0][0] != &bufs[2][0] {
		t.Fatalf("Alloc after Put = %d, not the returned buffer", n)
	}
	if a := testing.AllocsPerRun(100, func() { p.Alloc(bufs[:1]); p.Put(bufs[0]) }); a != 0 {
		t.Fatalf("Alloc/Put allocate %v times", a)
	}
}

func TestPoolOnStride(t *testing.T) {
	back := make([]byte, 1000)
	var p Pool
	p.InitOn(back, 3, 128, 100)
	bufs := make([][]byte, 4)
	if n := p.Alloc(bufs); n != 3 {
		t.Fatalf("Alloc = %d, want 3", n)
	}
	for _, b := range bufs[:3] {
		off := p.Offset(p.Take(b[:10]))
		if len(b) != 100 || cap(b) != 100 || &b[0] != &back[off] || off%128 != 0 || off >= 3*128 {
			t.Fatalf("buffer len %d cap %d at offset %d", len(b), cap(b), off)
		}
	}
	if p.Free() != 0 || p.Take(bufs[0]) != -1 || p.Put(bufs[1]) {
		t.Fatal("a buffer taken back is not outstanding any more, yet not free until Release")
	}
	p.Release(2)
	if n := p.Alloc(bufs[:1]); n != 1 || &bufs[0][0] != &back[256] {
		t.Fatalf("Alloc after Release(2) = %d, not slot 2", n)
	}
	if p.Take(back[100:]) != -1 || p.Take(back[128:]) != -1 {
		t.Fatal("Take accepted a misaligned or free slot")
	}
}
