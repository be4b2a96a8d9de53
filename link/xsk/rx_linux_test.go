package xsk

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/roce/wire"
)

// fakeRing is a ring over Go memory, standing in for the kernel's mmap'd one
// so that Receive can be fed descriptors the kernel would not produce on
// demand (hostile splits, chunks out of order).
func fakeRing(n uint32, entry uintptr) ring {
	idx := make([]uint32, 3) // producer, consumer, flags
	descs := make([]uint64, int(n)*int(entry)/8)
	return ring{producer: &idx[0], consumer: &idx[1], flags: &idx[2],
		descs: unsafe.Pointer(&descs[0]), mask: n - 1, size: n}
}

// fakeSocket is a Socket with rxChunks 4 KiB receive chunks, every one on
// its fill ring, frames up to mtu+22 bytes, no file descriptor.
func fakeSocket(rxChunks int, mtu int) *Socket {
	s := &Socket{fd: -1, efd: -1, chunk: 4096, mtu: mtu, sg: true}
	s.umem = make([]byte, rxChunks*4096)
	s.rx = fakeRing(uint32(rxChunks), unsafe.Sizeof(unix.XDPDesc{}))
	s.fill = fakeRing(uint32(rxChunks), 8)
	s.fill.prod = uint32(rxChunks) // all handed to the "kernel"
	*s.fill.producer = s.fill.prod
	s.rxHeld = make([]uint64, 0, rxChunks)
	s.maxRx = mtu + 22
	s.scratch = make([][]byte, 4)
	for i := range s.scratch {
		s.scratch[i] = make([]byte, s.maxRx)
	}
	return s
}

// deliver puts frame into the socket's RX ring as the kernel would: split
// after the byte counts in cuts, piece k written at headroom bytes into
// chunk chunks[k].
func (s *Socket) deliver(t testing.TB, frame []byte, cuts []int, chunks []uint64, headroom uint64) {
	t.Helper()
	if len(chunks) != len(cuts)+1 {
		t.Fatalf("%d chunks for %d pieces", len(chunks), len(cuts)+1)
	}
	off := 0
	for k, c := range chunks {
		end := len(frame)
		if k < len(cuts) {
			end = cuts[k]
		}
		piece := frame[off:end]
		if uint64(len(piece))+headroom > s.chunk {
			t.Fatalf("piece %d of %d bytes does not fit a chunk", k, len(piece))
		}
		a := c*s.chunk + headroom
		copy(s.umem[a:], piece)
		d := s.rx.desc(*s.rx.producer)
		d.Addr, d.Len, d.Options = a, uint32(len(piece)), 0
		if k < len(chunks)-1 {
			d.Options = unix.XDP_PKT_CONTD
		}
		*s.rx.producer++
		*s.fill.consumer++ // the kernel took the chunk from the fill ring
		off = end
	}
}

// inUMEM reports whether f lies in the socket's UMEM (joined in place, not
// copied into a reassembly buffer).
func (s *Socket) inUMEM(f []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	b := uintptr(unsafe.Pointer(&s.umem[0]))
	return p >= b && p < b+uintptr(len(s.umem))
}

// roceFrame is a PMTU 4096 RDMA WRITE FIRST frame (4170 bytes with the RETH)
// with a sealed ICRC.
func roceFrame(t testing.TB, seed byte) []byte {
	t.Helper()
	p := wire.Packet{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		SrcIP: netipAddr(198, 51, 100, 1), DstIP: netipAddr(198, 51, 100, 2), TTL: 64, IPFlags: 2,
		SrcPort: 49152, DstPort: wire.UDPPort,
		BTH:     wire.BTH{Opcode: wire.RCWriteFirst, PKey: 0xffff, DestQPN: 0x12, PSN: 7},
		RETH:    wire.RETH{VA: 0x1000, RKey: 0x55, DMALen: 8192},
		Payload: make([]byte, 4096),
	}
	for i := range p.Payload {
		p.Payload[i] = byte(i*7) + seed
	}
	b := make([]byte, p.FrameLen())
	n, err := p.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// receiveAll calls Receive until it returns no frame and returns copies of
// what it returned, and whether each was in the UMEM.
func receiveAll(t *testing.T, s *Socket) (frames [][]byte, inPlace []bool) {
	t.Helper()
	rx := make([][]byte, 8)
	for range 100 {
		n, err := s.Receive(rx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		for _, f := range rx[:n] {
			frames = append(frames, bytes.Clone(f))
			inPlace = append(inPlace, s.inUMEM(f))
		}
	}
	t.Fatal("Receive kept returning frames")
	return
}

// A multi-buffer frame whose chunks follow each other in the UMEM comes back
// joined in place, byte for byte the frame sent, whatever the split: the
// kernel's (3840 bytes, then the rest), headers cut across fragments, the
// ICRC cut, three and more fragments, no headroom. Chunks out of order fall
// back to a reassembly copy, equal too. Every frame decodes as the contiguous
// one does, and the chunks return to the fill ring.
func TestReceiveJoinsFragments(t *testing.T) {
	fr := roceFrame(t, 1)
	var want wire.Packet
	if err := want.Decode(fr); err != nil {
		t.Fatal(err)
	}
	n := len(fr)
	cases := []struct {
		name     string
		cuts     []int
		chunks   []uint64
		headroom uint64
		inPlace  bool
	}{
		{"kernel split", []int{3840}, []uint64{0, 1}, 256, true},
		{"eth header cut", []int{7, 3840}, []uint64{2, 3, 4}, 256, true},
		{"ip header cut", []int{14 + 9, 3840}, []uint64{5, 6, 7}, 256, true},
		{"bth cut", []int{42 + 5, 3840}, []uint64{8, 9, 40}, 256, false},
		{"reth cut", []int{54 + 3, 3000}, []uint64{41, 42, 43}, 256, true},
		{"icrc cut", []int{3000, n - 2}, []uint64{10, 11, 12}, 256, true},
		{"last byte alone", []int{3840, n - 1}, []uint64{13, 44, 46}, 256, false},
		{"three fragments", []int{1000, 3000}, []uint64{14, 15, 16}, 256, true},
		{"one byte fragments first", []int{1, 2, 3, 3840}, []uint64{17, 18, 19, 20, 21}, 256, true},
		{"no headroom", []int{4096}, []uint64{22, 23}, 0, true},
		{"chunks reversed", []int{3840}, []uint64{25, 24}, 256, false},
		{"chunks apart", []int{3840}, []uint64{26, 48}, 256, false},
	}
	s := fakeSocket(64, 9000)
	for _, c := range cases {
		s.deliver(t, fr, c.cuts, c.chunks, c.headroom)
	}
	got, inPlace := receiveAll(t, s)
	if len(got) != len(cases) {
		t.Fatalf("%d frames received, want %d", len(got), len(cases))
	}
	for i, c := range cases {
		if !bytes.Equal(got[i], fr) {
			t.Errorf("%s: frame differs from the one sent", c.name)
			continue
		}
		if inPlace[i] != c.inPlace {
			t.Errorf("%s: joined in place %v, want %v", c.name, inPlace[i], c.inPlace)
		}
		var p wire.Packet
		if err := p.DecodeWritable(got[i]); err != nil || p.BTH != want.BTH || p.RETH != want.RETH || !bytes.Equal(p.Payload, want.Payload) {
			t.Errorf("%s: decode %v, BTH %+v RETH %+v", c.name, err, p.BTH, p.RETH)
		}
	}
	var joined, copied uint64
	for _, c := range cases {
		if c.inPlace {
			joined++
		} else {
			copied++
		}
	}
	if s.rxJoined.Load() != joined || s.rxCopied.Load() != copied {
		t.Errorf("counted %d joined, %d copied; want %d, %d", s.rxJoined.Load(), s.rxCopied.Load(), joined, copied)
	}
	// Every chunk a frame used is back on the fill ring (chunk bases).
	held := map[uint64]bool{}
	for i := uint32(64); i != s.fill.prod; i++ {
		a := *s.fill.addr(i)
		if a%4096 != 0 {
			t.Errorf("fill ring got %#x, not a chunk base", a)
		}
		held[a/4096] = true
	}
	for _, c := range cases {
		for _, ch := range c.chunks {
			if !held[ch] {
				t.Errorf("%s: chunk %d not returned to the fill ring", c.name, ch)
			}
		}
	}
}

// Hostile multi-buffer input: a truncated last fragment gives the truncated
// frame (which decode rejects, as it does the same bytes contiguous); a frame
// longer than MTU+22 bytes in too many fragments is dropped and counted, and
// the frame after it still arrives; a frame whose last fragment is not in
// the ring yet waits for it.
func TestReceiveHostileFragments(t *testing.T) {
	fr := roceFrame(t, 2)
	s := fakeSocket(64, 4200)

	// Truncated: the last fragment ends 10 bytes early.
	short := fr[:len(fr)-10]
	s.deliver(t, short, []int{3840}, []uint64{0, 1}, 256)
	// Too many fragments: 3 × 3000 bytes, over the 4222-byte room.
	big := bytes.Repeat([]byte{0xab}, 9000)
	s.deliver(t, big, []int{3000, 6000}, []uint64{2, 3, 4}, 256)
	// A good frame after it.
	s.deliver(t, fr, []int{3840}, []uint64{5, 6}, 256)
	got, _ := receiveAll(t, s)
	if len(got) != 2 {
		t.Fatalf("%d frames, want 2 (the truncated one and the good one)", len(got))
	}
	var p, q wire.Packet
	errJoined, errFlat := p.Decode(got[0]), q.Decode(short)
	if !bytes.Equal(got[0], short) || errJoined == nil || errJoined.Error() != errFlat.Error() {
		t.Errorf("truncated frame: equal %v, decode %v, contiguous %v", bytes.Equal(got[0], short), errJoined, errFlat)
	}
	if !bytes.Equal(got[1], fr) {
		t.Error("the frame after the oversized one differs")
	}
	if s.rxErrors.Load() != 1 {
		t.Errorf("RxTooLong %d, want 1", s.rxErrors.Load())
	}

	// A frame whose last descriptor is not in the ring yet.
	s.deliver(t, fr, []int{3840}, []uint64{7, 8}, 256)
	*s.rx.producer-- // withhold the last fragment
	if got, _ := receiveAll(t, s); len(got) != 0 {
		t.Fatalf("a frame without its last fragment was returned")
	}
	*s.rx.producer++
	if got, _ := receiveAll(t, s); len(got) != 1 || !bytes.Equal(got[0], fr) {
		t.Fatalf("the completed frame: %d frames", len(got))
	}
}

// Random splits over random chunk orders: every frame comes back equal to
// what was sent, in place exactly when its chunks follow each other.
func TestReceiveRandomFragments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := fakeSocket(256, 9000)
	for round := range 200 {
		fr := roceFrame(t, byte(round))
		fr = fr[:40+r.IntN(len(fr)-40)] // any length: the link does not parse
		pieces := 2 + r.IntN(3)
		cuts := make([]int, 0, pieces-1)
		for k := 1; k < pieces; k++ {
			lo := 1
			if len(cuts) > 0 {
				lo = cuts[len(cuts)-1] + 1
			}
			hi := len(fr) - (pieces - k)
			if lo > hi || hi-lo > 3000 {
				lo = max(lo, hi-3000)
			}
			if lo > hi {
				break
			}
			cuts = append(cuts, lo+r.IntN(hi-lo+1))
		}
		start := uint64(r.IntN(256 - 8))
		chunks := make([]uint64, len(cuts)+1)
		adjacent := r.IntN(2) == 0
		for k := range chunks {
			chunks[k] = start + uint64(k)
		}
		if !adjacent {
			chunks[len(chunks)-1] += 2
		}
		s.deliver(t, fr, cuts, chunks, uint64(r.IntN(2))*256)
		got, inPlace := receiveAll(t, s)
		if len(got) != 1 || !bytes.Equal(got[0], fr) {
			t.Fatalf("round %d (cuts %v chunks %v): %d frames, not the one sent", round, cuts, chunks, len(got))
		}
		if inPlace[0] != adjacent {
			t.Fatalf("round %d: in place %v, chunks adjacent %v", round, inPlace[0], adjacent)
		}
		s.recycleRx()
	}
}

func netipAddr(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }

// BenchmarkReceiveMultiBuffer: Receive's cost per PMTU 4096 frame split as
// the kernel splits it in copy mode (3840 bytes, then the rest), joined in
// place (adjacent chunks) against the reassembly copy (chunks out of
// order). The frames are written into the UMEM outside the timer, so they
// are in this CPU's cache: on a real socket the kernel wrote them from
// another CPU and the copy costs more.
func BenchmarkReceiveMultiBuffer(b *testing.B) {
	fr := roceFrame(b, 3)
	for _, c := range []struct {
		name    string
		swapped bool
	}{{"joined", false}, {"copied", true}} {
		b.Run(c.name, func(b *testing.B) {
			const batch = 4
			s := fakeSocket(64, 9000)
			rx := make([][]byte, batch)
			b.SetBytes(int64(len(fr)))
			for range b.N {
				b.StopTimer()
				for k := range batch {
					ch := []uint64{uint64(2 * k), uint64(2*k + 1)}
					if c.swapped {
						ch[0], ch[1] = ch[1], ch[0]
					}
					s.deliver(b, fr, []int{3840}, ch, 256)
				}
				b.StartTimer()
				if n, err := s.Receive(rx); n != batch || err != nil {
					b.Fatalf("%d frames, %v", n, err)
				}
				b.StopTimer()
				s.recycleRx()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
		})
	}
}
