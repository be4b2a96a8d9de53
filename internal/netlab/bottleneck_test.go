package netlab

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// ipv4Frame is an Ethernet/IPv4/UDP frame of n bytes with the given TOS and
// a valid header checksum.
func ipv4Frame(rng *rand.Rand, tos byte, n int) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(rng.Uint32())
	}
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	f[14], f[15] = 0x45, tos
	binary.BigEndian.PutUint16(f[16:], uint16(n-14))
	f[23] = 17
	binary.BigEndian.PutUint16(f[24:], 0)
	binary.BigEndian.PutUint16(f[24:], ^onesSum(f[14:34]))
	return f
}

func onesSum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func TestMarkCE(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		ecn := byte(i % 4)
		f := ipv4Frame(rng, byte(rng.Uint32())&^3|ecn, 60)
		orig := bytes.Clone(f)
		marked := markCE(f)
		if marked != (ecn == 1 || ecn == 2) {
			t.Fatalf("ECN %d: marked %v", ecn, marked)
		}
		if onesSum(f[14:34]) != 0xffff {
			t.Fatalf("ECN %d: header checksum wrong after marking: %x", ecn, f[14:34])
		}
		want := bytes.Clone(orig)
		if marked {
			want[15] |= 3
			want[24], want[25] = f[24], f[25]
		}
		if !bytes.Equal(f, want) {
			t.Fatalf("ECN %d: frame changed beyond TOS and checksum:\n got %x\nwant %x", ecn, f, orig)
		}
	}
	// IPv6 (behind an 802.1Q tag): the ECN bits are the low two of the
	// traffic class, which straddles bytes 0 and 1.
	for ecn := range byte(4) {
		f := make([]byte, 18+40)
		binary.BigEndian.PutUint16(f[12:], 0x8100)
		binary.BigEndian.PutUint16(f[16:], 0x86DD)
		f[18], f[19], f[20] = 0x6b, 0x80|ecn<<4|0x5, 0xcd // traffic class 0xb8|ecn, flow label 0x5cd..
		orig := bytes.Clone(f)
		if markCE(f) != (ecn == 1 || ecn == 2) {
			t.Fatalf("IPv6 ECN %d: wrong decision", ecn)
		}
		if ecn == 1 || ecn == 2 {
			orig[19] |= 0x30
		}
		if !bytes.Equal(f, orig) {
			t.Fatalf("IPv6 ECN %d: got %x want %x", ecn, f, orig)
		}
	}
	// Neither IPv4 nor IPv6, or too short: untouched.
	for _, f := range [][]byte{make([]byte, 60), {0, 1, 2}, append(make([]byte, 12), 0x08, 0x00, 0x45, 0x02)} {
		orig := bytes.Clone(f)
		if markCE(f) || !bytes.Equal(f, orig) {
			t.Fatalf("marked a non-IP or short frame %x", orig)
		}
	}
}

func newTestBottleneck(t *testing.T, cfg Bottleneck, maxFrame int) *bottleneck {
	t.Helper()
	if err := cfg.check(maxFrame); err != nil {
		t.Fatal(err)
	}
	return newBottleneck(cfg, maxFrame, rand.New(rand.NewPCG(3, 4)), &bottleneckCounters{})
}

// With a fake clock: the queue drains at Rate whatever the frame sizes, and
// every frame leaves intact and in order through the wrapping byte ring.
func TestBottleneckRateAndOrder(t *testing.T) {
	const rate = 100e6
	for _, c := range []struct {
		bytesMode bool
		burst     int
		step      time.Duration // between drains
	}{{false, 0, 50 * time.Microsecond}, {true, 0, 50 * time.Microsecond}, {false, 3000, 2 * time.Millisecond}} {
		// The third case drains every 2 ms with a 3000-byte bucket: a busy
		// port makes up for the time it was not called.
		bytesMode := c.bytesMode
		cfg := Bottleneck{Rate: rate, Queue: 64, Bytes: bytesMode, Burst: c.burst}
		if bytesMode {
			cfg.Queue = 50000
		}
		b := newTestBottleneck(t, cfg, 1518)
		rng := rand.New(rand.NewPCG(5, 6))
		var next, seen uint32
		var sentBytes int
		write := func(f []byte) bool {
			if binary.BigEndian.Uint32(f) != seen || !bytes.Equal(f[4:], bytes.Repeat([]byte{byte(seen)}, len(f)-4)) {
				t.Fatalf("frame %d out of the queue damaged or out of order (%d bytes)", seen, len(f))
			}
			seen++
			sentBytes += len(f)
			return true
		}
		var now int64
		step := int64(c.step)
		var measuredFrom int64 = int64(100 * time.Millisecond)
		var bytesAt int
		for now = 0; now < int64(600*time.Millisecond); now += step {
			// Offer 1.5× the rate in frames of 42..1518 bytes.
			for range 6 * int(step/int64(50*time.Microsecond)) {
				f := make([]byte, 42+rng.IntN(1518-42+1))
				binary.BigEndian.PutUint32(f, next)
				for i := 4; i < len(f); i++ {
					f[i] = byte(next)
				}
				before := b.c.tailDropped.Load()
				b.enqueue(f)
				if b.c.tailDropped.Load() == before {
					next++
				}
				if b.depth() > cfg.Queue {
					t.Fatalf("queue at %d, limit %d", b.depth(), cfg.Queue)
				}
			}
			b.drain(now, write)
			if now == measuredFrom {
				bytesAt = sentBytes
			}
		}
		got := float64(sentBytes-bytesAt) * 8 / (float64(now-measuredFrom) / 1e9)
		if got < rate*0.99 || got > rate*1.01 {
			t.Errorf("bytes %v: drained %.2f Mbit/s, want %.0f", bytesMode, got/1e6, rate/1e6)
		}
		st := b.c.stats()
		if st.TailDropped == 0 || st.Bytes != uint64(sentBytes) {
			t.Errorf("bytes %v: stats %+v, %d bytes written", bytesMode, st, sentBytes)
		}
		if w := b.wait(now); b.n > 0 && (w < 0 || w > 3*time.Millisecond) {
			t.Errorf("bytes %v: wait %v with %d frames queued", bytesMode, w, b.n)
		}
	}
}

// The marking probability rises linearly between the thresholds: with the
// queue held at a given depth the share of ECT frames marked is MarkP times
// the depth's place between MarkMin and MarkMax, 0 at or below MarkMin and 1
// from MarkMax on; not-ECT frames are never marked.
func TestBottleneckMarkingCurve(t *testing.T) {
	const minQ, maxQ, p = 10, 30, 0.4
	rng := rand.New(rand.NewPCG(7, 8))
	for _, depth := range []int{0, 5, 10, 15, 20, 25, 29, 30, 40} {
		b := newTestBottleneck(t, Bottleneck{Rate: 1e6, Queue: 100, MarkMin: minQ, MarkMax: maxQ, MarkP: p}, 1518)
		for range depth {
			b.enqueue(ipv4Frame(rng, 0, 100))
		}
		const n = 20000
		marked := 0
		for range n {
			f := ipv4Frame(rng, 0x02, 100)
			b.enqueue(f)
			if f[15]&3 == 3 {
				marked++
			}
			plain := ipv4Frame(rng, 0, 100)
			b.enqueue(plain)
			if plain[15] != 0 {
				t.Fatal("a not-ECT frame was marked")
			}
			b.pop() // keep the depth
			b.pop()
		}
		want := 0.0
		switch {
		case depth >= maxQ:
			want = 1
		case depth > minQ:
			want = p * float64(depth-minQ) / (maxQ - minQ)
		}
		if got := float64(marked) / n; got < want-0.015 || got > want+0.015 {
			t.Errorf("depth %d: marked %.3f of ECT frames, want %.3f", depth, got, want)
		}
	}
}

func TestBottleneckCheck(t *testing.T) {
	for _, c := range []Bottleneck{
		{Rate: -1},
		{Rate: 1e6, MarkP: 1.5},
		{Rate: 1e6, MarkP: 0.5, MarkMin: 20, MarkMax: 10},
		{Rate: 1e6, Bytes: true, Queue: 1000},
	} {
		if err := c.check(1518); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c := Bottleneck{Rate: 8e9}
	if err := c.check(1518); err != nil || c.Burst != 5e6 || c.Queue != 1000 {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}
