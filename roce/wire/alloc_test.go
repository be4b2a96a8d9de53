package wire_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

func TestZeroAllocs(t *testing.T) {
	frames := rxeFrames(t)
	var p wire.Packet
	buf := make([]byte, 9000)
	for _, f := range frames {
		if a := testing.AllocsPerRun(20, func() {
			if err := p.Decode(f.data); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: Decode allocates %v times", f, a)
		}
		writable := bytes.Clone(f.data)
		if a := testing.AllocsPerRun(20, func() {
			if err := p.DecodeWritable(writable); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: DecodeWritable allocates %v times", f, a)
		}
		if a := testing.AllocsPerRun(20, func() {
			if err := wire.SetICRC(writable); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: SetICRC allocates %v times", f, a)
		}
		if err := p.Decode(f.data); err != nil {
			t.Fatal(err)
		}
		if a := testing.AllocsPerRun(20, func() {
			if _, err := p.Encode(buf); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: Encode allocates %v times", f, a)
		}
		n := len(p.Payload)
		if a := testing.AllocsPerRun(20, func() {
			if _, err := p.EncodeInPlace(buf, n); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: EncodeInPlace allocates %v times", f, a)
		}
		if a := testing.AllocsPerRun(20, func() {
			if _, err := wire.ComputeICRC(f.data); err != nil {
				t.Fatal(err)
			}
			if err := wire.VerifyICRC(f.data); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: ComputeICRC/VerifyICRC allocate %v times", f, a)
		}
	}
	// The OOO opcodes, accepted and refused.
	rng := rand.New(rand.NewPCG(17, 18))
	for _, op := range oooOpcodes {
		info, _ := op.Info()
		for _, n := range payloadLens(info) {
			_, frame := oooFrame(t, rng, op, false, n)
			if a := testing.AllocsPerRun(20, func() {
				if p.Decode(frame) == nil {
					t.Fatal("OOO frame decoded without AcceptOOO")
				}
				if err := p.DecodeWith(frame, wire.AcceptOOO|wire.InPlace); err != nil {
					t.Fatal(err)
				}
				if err := p.DecodeWith(frame, wire.AcceptOOO); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("%v n=%d: DecodeWith allocates %v times", op, n, a)
			}
			if a := testing.AllocsPerRun(20, func() {
				if _, err := p.Encode(buf); err != nil {
					t.Fatal(err)
				}
				if _, err := p.EncodeInPlace(buf, n); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("%v n=%d: Encode allocates %v times", op, n, a)
			}
		}
	}
	// Error paths allocate nothing either.
	bad := append([]byte(nil), frames[0].data...)
	bad[len(bad)-1] ^= 0xFF
	if a := testing.AllocsPerRun(20, func() {
		if p.Decode(bad) == nil {
			t.Fatal("corrupt frame decoded")
		}
		if p.Decode(bad[:30]) == nil {
			t.Fatal("short frame decoded")
		}
		if p.DecodeWritable(bad) == nil {
			t.Fatal("corrupt frame decoded")
		}
	}); a != 0 {
		t.Errorf("Decode error paths allocate %v times", a)
	}
}
