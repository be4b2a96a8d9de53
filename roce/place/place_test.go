package place

import (
	"errors"
	"testing"
)

// TestRoundTrip: every field survives Encode and Decode; QPNs, PSNs and
// MSNs are cut to 24 bits on the way in.
func TestRoundTrip(t *testing.T) {
	m := Msg{Kind: KindAns, Op: OpSendImm, Flags: FlagDone, Syndrome: 0x1F, Status: Place, Tag: 0xdeadbeef,
		SrcQPN: 0x123456, DstQPN: 0xabcdef, PSN: 0xfffffe, NPkts: 17, MSN: 99, Len: 65536, RKey: 0x1234,
		VA: 0x7fff_0000_1000, Imm: 0xcafe, NSegs: 3}
	for i := range 3 {
		m.SegsBuf[i] = Seg{Region: uint32(i + 1), Len: uint32(100 * i), Off: uint64(1) << (20 + i)}
	}
	b := make([]byte, MaxLen)
	n := Encode(b, &m)
	if n != HeaderLen+3*16 || !Is(b[:n]) {
		t.Fatalf("encoded %d bytes", n)
	}
	var got Msg
	if err := Decode(b[:n], &got); err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Errorf("decoded %+v, want %+v", got, m)
	}
	m.SrcQPN = 0xff000001
	Encode(b, &m)
	if Decode(b[:n], &got); got.SrcQPN != 1 {
		t.Errorf("source QPN %#x, want 24 bits", got.SrcQPN)
	}
	if Total(got.Segs()) != 300 {
		t.Errorf("total %d", Total(got.Segs()))
	}
}

// TestDecodeRefuses: frames of another EtherType, truncated ones, unknown
// kinds and segment counts past MaxSegs or past the frame's end; Encode
// refuses a short buffer and too many segments.
func TestDecodeRefuses(t *testing.T) {
	m := Msg{Kind: KindReq, Op: OpWrite, NSegs: 2}
	b := make([]byte, MaxLen)
	n := Encode(b, &m)
	var got Msg
	for _, tc := range []struct {
		name string
		f    func() []byte
		want error
	}{
		{"empty", func() []byte { return nil }, ErrKind},
		{"IPv4", func() []byte { c := append([]byte(nil), b[:n]...); c[12], c[13] = 8, 0; return c }, ErrKind},
		{"header cut", func() []byte { return b[:HeaderLen-1] }, ErrShort},
		{"segment cut", func() []byte { return b[:n-1] }, ErrShort},
		{"kind 0", func() []byte { c := append([]byte(nil), b[:n]...); c[14] = 0; return c }, ErrKind},
		{"kind 8", func() []byte { c := append([]byte(nil), b[:n]...); c[14] = byte(KindRevoke) + 1; return c }, ErrKind},
		{"65 segments", func() []byte { c := append([]byte(nil), b[:MaxLen]...); c[18] = MaxSegs + 1; return c }, ErrSegs},
	} {
		if err := Decode(tc.f(), &got); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if Encode(b[:n-1], &m) != 0 {
		t.Error("encoded into a short buffer")
	}
	m.NSegs = MaxSegs + 1
	if Encode(b, &m) != 0 {
		t.Error("encoded 65 segments")
	}
}
