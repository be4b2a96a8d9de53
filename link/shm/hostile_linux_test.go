package shm

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// hostilePair makes a port in this process; the test plays a hostile
// attacher by writing into the shared memory through the attached end's
// mapping, and drives the creator's end d.
func hostilePair(t testing.TB, cfg Config) (d, c *Link, lay layout) {
	t.Helper()
	d, fds, err := NewPort(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err = Attach(fds)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	cfg, _ = cfg.resolve()
	lay, _ = newLayout(cfg)
	return d, c, lay
}

func put32(m []byte, off int, v uint32) { binary.NativeEndian.PutUint32(m[off:], v) }

// checkEnd asserts d's books: every received frame lies in its receive
// area and is at most MaxFrame long; free, held and queued slots add up.
func checkEnd(t testing.TB, d *Link, frames [][]byte) {
	t.Helper()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(d.rx.area)))
	for _, f := range frames {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
		if p < base || p+uintptr(len(f)) > base+uintptr(len(d.rx.area)) || len(f) > d.props.MaxFrame || len(f) < minFrame {
			t.Fatalf("frame of %d bytes at %#x outside the area [%#x, +%d)", len(f), p, base, len(d.rx.area))
		}
	}
	q := &d.tx
	if inRing := int(q.prod - q.cons); inRing < 0 || inRing > int(q.size) || q.pool.Free()+q.held+inRing != q.slots {
		t.Fatalf("slot books: %d free + %d held + %d queued != %d slots", q.pool.Free(), q.held, q.prod-q.cons, q.slots)
	}
}

func TestHostileIndexesAndDescriptors(t *testing.T) {
	d, c, lay := hostilePair(t, Config{MTU: 1500, Ring: 8, Buffers: 4})
	defer d.Close()
	defer c.Close()
	m := c.mem
	up := lay.ctl[1] // the ring d receives from
	frames := make([][]byte, 16)
	for _, tail := range []uint32{9, 1 << 31, 0xffffffff} {
		put32(m, up+tailOff, tail)
		if n, err := d.Receive(frames); n != 0 || err != nil {
			t.Fatalf("tail %#x: received %d, %v", tail, n, err)
		}
	}
	if st := d.Stats(); st.BadIndexes != 3 {
		t.Errorf("BadIndexes = %d after 3 bad tails", st.BadIndexes)
	}
	area := lay.slots * lay.slotSize
	descs := []struct{ off, len uint32 }{
		{uint32(area), 100},                     // past the area
		{uint32(lay.slotSize) + 1, 100},         // not at a slot
		{0, 0},                                  // empty
		{0, 13},                                 // runt
		{0, uint32(lay.maxFrame) + 1},           // over MaxFrame
		{uint32(area - lay.slotSize), 0xffffff}, // last slot, huge
		{uint32(lay.slotSize), uint32(lay.maxFrame)},
	}
	for i, ds := range descs {
		binary.NativeEndian.PutUint64(m[lay.desc[1]+8*i:], uint64(ds.off)|uint64(ds.len)<<32)
	}
	put32(m, up+tailOff, uint32(len(descs)))
	n, _ := d.Receive(frames)
	checkEnd(t, d, frames[:n])
	if n != 1 || len(frames[0]) != lay.maxFrame {
		t.Fatalf("received %d frames, want the one good one", n)
	}
	if st := d.Stats(); st.BadDescs != 6 {
		t.Errorf("BadDescs = %d, want 6", st.BadDescs)
	}
	// The head of the ring d sends on, run wild: ignored and counted when
	// d needs room, and Alloc still hands out only what is free.
	bufs := make([][]byte, 8)
	sendAll := func() {
		k := d.Alloc(bufs)
		for i := range k {
			bufs[i] = bufs[i][:64]
		}
		d.Send(bufs[:k])
	}
	sendAll()
	sendAll() // the ring of 8 is full
	for i, h := range []uint32{9, 0xfffffff0, 1 << 20} {
		put32(m, lay.ctl[0]+headOff, h)
		sendAll()
		if st := d.Stats(); st.BadIndexes != uint64(4+i) || st.Overflow != uint64(4*(i+1)) {
			t.Errorf("head %#x: %+v, want the head counted bad and the frames overflowed", h, st)
		}
		if got := d.Alloc(bufs); got != lay.buffers {
			t.Fatalf("head %#x: Alloc gave %d, want %d", h, got, lay.buffers)
		}
		checkEnd(t, d, nil)
		d.Free(bufs[:lay.buffers])
	}
	// A sane head again frees what it covers.
	put32(m, lay.ctl[0]+headOff, 8)
	sendAll()
	if st := d.Stats(); st.Sent != 12 {
		t.Errorf("after a sane head: %+v, want 4 more frames sent", st)
	}
	checkEnd(t, d, nil)
}

// FuzzShmPeer lets the fuzzer play the peer: it writes arbitrary bytes into
// the control blocks and descriptor rings of both directions, interleaved
// with the creator's end receiving, sending and waiting. Nothing may panic,
// no frame may lie outside the frame area or exceed MaxFrame, and the
// sender's slot books must balance.
func FuzzShmPeer(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 9, 0, 0, 0, 1})
	f.Add([]byte{2, 2, 1, 0, 0x80, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 3, 1, 2})
	f.Add([]byte{2, 2, 3, 1, 0, 1, 0x80, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, c, lay := hostilePair(t, Config{MTU: 100, Ring: 4, Buffers: 2})
		defer d.Close()
		defer c.Close()
		// The control blocks and descriptors of both directions.
		region := c.mem[lay.ctl[0] : lay.desc[1]+lay.ring*descSize]
		frames := make([][]byte, 8)
		bufs := make([][]byte, 4)
		for len(data) > 0 {
			op := data[0]
			data = data[1:]
			switch op % 5 {
			case 0: // write up to 16 bytes at an offset in the region
				if len(data) < 2 {
					return
				}
				off := int(binary.LittleEndian.Uint16(data)) % len(region)
				data = data[2:]
				n := min(int(op>>3)+1, len(data))
				copy(region[off:], data[:n])
				data = data[n:]
			case 1:
				n, err := d.Receive(frames)
				if err != nil {
					t.Fatal(err)
				}
				checkEnd(t, d, frames[:n])
			case 2:
				k := d.Alloc(bufs[:int(op>>3)%4+1])
				for i := range k {
					bufs[i] = bufs[i][:14+int(op)%80]
				}
				d.Send(bufs[:k])
				checkEnd(t, d, nil)
			case 3:
				d.Wait(0)
			case 4: // the peer's end, which checks what d wrote
				n, _ := c.Receive(frames)
				checkEnd(t, c, frames[:n])
			}
		}
	})
}
