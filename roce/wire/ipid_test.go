package wire_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

const (
	ethLen  = 14
	ipv4Len = 20
	udpLen  = 8
)

// TestRecoverIPv4ID: for every IPv4 frame rxe sent (real, non-zero IP IDs),
// a copy rebuilt with Identification 0 — what link/udp hands the engine —
// gives back the captured Identification; a corrupted copy is refused.
func TestRecoverIPv4ID(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, nonZero, refused := 0, 0, 0
	for _, f := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(f.data); err != nil || p.IPv6 {
			continue
		}
		n++
		if p.IPID != 0 {
			nonZero++
		}
		g := append([]byte(nil), f.data...)
		if id, ok := wire.RecoverIPv4ID(g); !ok || id != p.IPID {
			t.Fatalf("%s: intact frame: got %#x, %v; want %#x", f.String(), id, ok, p.IPID)
		}
		if !wire.SetIPv4ID(g, 0) {
			t.Fatalf("%s: wire.SetIPv4ID refused", f.String())
		}
		id, ok := wire.RecoverIPv4ID(g)
		if !ok || id != p.IPID {
			t.Fatalf("%s: rebuilt with ID 0: got %#x, %v; want %#x", f.String(), id, ok, p.IPID)
		}
		// A right guess and a wrong one give the same answer, hashing a
		// copy of the headers or the frame in place (which it leaves as
		// it was).
		for _, guess := range []uint16{p.IPID, p.IPID + 1} {
			if id, ok := wire.RecoverIPv4IDGuess(g, guess); !ok || id != p.IPID {
				t.Fatalf("%s: guessing %#x: got %#x, %v; want %#x", f.String(), guess, id, ok, p.IPID)
			}
			before := bytes.Clone(g)
			if id, ok := wire.RecoverIPv4IDGuessInPlace(g, guess); !ok || id != p.IPID || !bytes.Equal(g, before) {
				t.Fatalf("%s: in place, guessing %#x: got %#x, %v (frame unchanged: %v); want %#x",
					f.String(), guess, id, ok, bytes.Equal(g, before), p.IPID)
			}
		}
		wire.SetIPv4ID(g, id)
		var q wire.Packet
		if err := q.Decode(g); err != nil {
			t.Fatalf("%s: after wire.SetIPv4ID(%#x): %v", f.String(), id, err)
		}
		// Corrupt one byte past the IP header (BTH onward, not the masked
		// BTH byte 4) in the rebuilt copy.
		wire.SetIPv4ID(g, 0)
		off := ethLen + ipv4Len + udpLen
		if p.HasVLAN {
			off += 4
		}
		pos := off + rng.IntN(len(g)-off-wire.ICRCLen)
		if pos == off+4 {
			pos++
		}
		g[pos] ^= byte(1 + rng.IntN(255))
		if _, ok := wire.RecoverIPv4IDGuessInPlace(g, 1); ok {
			refused-- // explained by chance: about 2^-16 per frame
		} else {
			refused++
		}
	}
	if n < 300 || nonZero < 100 {
		t.Fatalf("walked %d IPv4 frames, %d with a non-zero ID: the captures are missing", n, nonZero)
	}
	if refused < n-2 {
		t.Fatalf("only %d of %d corrupted frames refused", refused, n)
	}
	first := rxeFrames(t)[0].data
	if a := testing.AllocsPerRun(100, func() { wire.RecoverIPv4ID(first) }); a != 0 {
		t.Fatalf("wire.RecoverIPv4ID allocates %v times", a)
	}
	if a := testing.AllocsPerRun(100, func() { wire.RecoverIPv4IDGuessInPlace(first, 0) }); a != 0 {
		t.Fatalf("wire.RecoverIPv4IDGuessInPlace allocates %v times", a)
	}
}

// TestChangeIPv4ID: every IPv4 frame rxe sent, moved to other
// Identifications, is byte-identical to re-encoding it with that
// Identification (ICRC updated without rehashing), and moving it back gives
// the captured bytes; a frame with a wrong ICRC only gets the new ID.
func TestChangeIPv4ID(t *testing.T) {
	eachIPv4(t, func(f capturedFrame, p *wire.Packet) {
		g := append([]byte(nil), f.data...)
		for _, id := range []uint16{p.IPID ^ 1, 0, 0xffff, p.IPID + 17} {
			icrcOK, ok := wire.ChangeIPv4ID(g, id)
			if !ok || (!icrcOK && id != p.IPID) {
				t.Fatalf("%s: ChangeIPv4ID(%#x) = %v, %v", f.String(), id, icrcOK, ok)
			}
			want := append([]byte(nil), f.data...)
			wire.SetIPv4ID(want, id)
			if err := wire.SetICRC(want); err != nil {
				t.Fatal(err)
			}
			if string(g) != string(want) {
				t.Fatalf("%s: with ID %#x:\n got % x\nwant % x", f.String(), id, g, want)
			}
		}
		wire.ChangeIPv4ID(g, p.IPID)
		if string(g) != string(f.data) {
			t.Fatalf("%s: back to ID %#x the frame differs", f.String(), p.IPID)
		}
		g[len(g)-5] ^= 0x40 // last payload byte or pad: the ICRC is now wrong
		bad := append([]byte(nil), g...)
		if icrcOK, ok := wire.ChangeIPv4ID(g, p.IPID+1); icrcOK || !ok {
			t.Fatalf("%s: corrupted frame: ChangeIPv4ID = %v, %v; want false, true", f.String(), icrcOK, ok)
		}
		wire.SetIPv4ID(bad, p.IPID+1)
		if string(g) != string(bad) {
			t.Fatalf("%s: corrupted frame changed beyond its ID", f.String())
		}
	})
	first := append([]byte(nil), rxeFrames(t)[0].data...)
	id := uint16(0)
	if a := testing.AllocsPerRun(100, func() { id++; wire.ChangeIPv4ID(first, id) }); a != 0 {
		t.Fatalf("wire.ChangeIPv4ID allocates %v times", a)
	}
}

// TestMoveIPv4ID: moving every IPv4 frame rxe sent to other Identifications
// gives the bytes ChangeIPv4ID gives (a right ICRC stays right); a frame
// with a wrong ICRC keeps exactly its error, so it is still refused.
func TestMoveIPv4ID(t *testing.T) {
	eachIPv4(t, func(f capturedFrame, p *wire.Packet) {
		g := append([]byte(nil), f.data...)
		h := append([]byte(nil), f.data...)
		for _, id := range []uint16{p.IPID ^ 1, 0, 0xffff, p.IPID + 17, p.IPID} {
			if !wire.MoveIPv4ID(g, id) {
				t.Fatalf("%s: MoveIPv4ID(%#x) refused", f.String(), id)
			}
			wire.ChangeIPv4ID(h, id)
			if string(g) != string(h) {
				t.Fatalf("%s: with ID %#x:\n got % x\nwant % x", f.String(), id, g, h)
			}
			if err := wire.VerifyICRC(g); err != nil {
				t.Fatalf("%s: moved to ID %#x: %v", f.String(), id, err)
			}
		}
		if string(g) != string(f.data) {
			t.Fatalf("%s: back to ID %#x the frame differs", f.String(), p.IPID)
		}
		g[len(g)-5] ^= 0x40 // the ICRC is now wrong
		errBefore := icrcError(t, g)
		if !wire.MoveIPv4ID(g, p.IPID+1) {
			t.Fatal("refused")
		}
		if e := icrcError(t, g); e != errBefore || e == 0 {
			t.Fatalf("%s: ICRC error %#x after the move, %#x before", f.String(), e, errBefore)
		}
	})
	if wire.MoveIPv4ID(make([]byte, 40), 1) {
		t.Error("a 40-byte frame was taken for RoCEv2")
	}
	first := append([]byte(nil), rxeFrames(t)[0].data...)
	id := uint16(0)
	if a := testing.AllocsPerRun(100, func() { id++; wire.MoveIPv4ID(first, id) }); a != 0 {
		t.Fatalf("wire.MoveIPv4ID allocates %v times", a)
	}
}

// icrcError is the carried ICRC XOR the one computed over frame.
func icrcError(t *testing.T, frame []byte) uint32 {
	t.Helper()
	c, err := wire.ComputeICRC(frame)
	if err != nil {
		t.Fatal(err)
	}
	end := ethLen + int(binary.BigEndian.Uint16(frame[ethLen+2:])) // IPv4 total length: no Ethernet padding
	return c ^ binary.LittleEndian.Uint32(frame[end-wire.ICRCLen:])
}

// eachIPv4 calls f for every IPv4 frame rxe sent, decoded, and fails the
// test when the captures hold fewer than 300.
func eachIPv4(t *testing.T, f func(capturedFrame, *wire.Packet)) {
	t.Helper()
	n := 0
	for _, c := range rxeFrames(t) {
		var p wire.Packet
		if err := p.Decode(c.data); err != nil || p.IPv6 {
			continue
		}
		n++
		f(c, &p)
	}
	if n < 300 {
		t.Fatalf("walked %d IPv4 frames: the captures are missing", n)
	}
}

// BenchmarkMoveIPv4ID: what a UDP_SEGMENT sender pays a frame to move its
// ICRC to the segment's Identification.
func BenchmarkMoveIPv4ID(b *testing.B) {
	var f []byte
	for _, c := range rxeFrames(b) {
		if len(c.data) > len(f) && c.data[12] == 0x08 && c.data[13] == 0x00 {
			f = append(f[:0], c.data...)
		}
	}
	for i := range b.N {
		wire.MoveIPv4ID(f, uint16(i&15))
	}
}
