package lmrm

import (
	"bytes"
	"errors"
	"testing"
)

var sampleMsgs = []Msg{
	{Kind: KAlloc, Bytes: 1 << 20, MinSlot: 4096},
	{Kind: KAllocAck, Pool: 3, Addr: 0x7f0000001000, RKey: 0x1234, SlotSize: 4096, Count: 256},
	{Kind: KAllocAck, Status: AckRefused},
	{Kind: KRelease, Pool: 1, Slots: []uint32{0, 5, 7}},
	{Kind: KRevoke, Pool: 2},
}

// TestMsgRoundTrip: every kind encodes to its documented length and decodes
// to the same message; the describer names it.
func TestMsgRoundTrip(t *testing.T) {
	lens := map[Kind]int{KAlloc: 24, KAllocAck: 32, KRevoke: 8}
	for _, m := range sampleMsgs {
		b := Append(nil, &m)
		if want, ok := lens[m.Kind]; ok && len(b) != want {
			t.Errorf("%v: %d bytes, want %d", m.Kind, len(b), want)
		}
		var d Msg
		if err := Decode(b, &d); err != nil {
			t.Fatalf("%v: %v", m.Kind, err)
		}
		if !bytes.Equal(Append(nil, &d), b) || d.String() != m.String() {
			t.Errorf("%v: decoded %v, want %v", m.Kind, &d, &m)
		}
		if s, ok := Describe(b); !ok || s != m.String() {
			t.Errorf("Describe: %q %v", s, ok)
		}
	}
	if got := (&sampleMsgs[3]).String(); got != "LMRM_RELEASE pool=1 n=3 slots=0,5,7" {
		t.Errorf("release prints %q", got)
	}
	if p, s, ok := ParseImm(Imm(200, MaxSlots-1)); p != 200 || s != MaxSlots-1 || !ok {
		t.Errorf("immediate round trip: %d %d %v", p, s, ok)
	}
	if _, _, ok := ParseImm(0x20000005); ok {
		t.Error("an immediate of kind 2 parses as data")
	}
}

// TestMsgMalformed: truncated, padded, unknown or inconsistent messages are
// refused with ErrMalformed.
func TestMsgMalformed(t *testing.T) {
	alloc := Append(nil, &sampleMsgs[0])
	rel := Append(nil, &sampleMsgs[3])
	for name, b := range map[string][]byte{
		"empty":         nil,
		"bad magic":     append([]byte("XDAM"), alloc[4:]...),
		"short alloc":   alloc[:20],
		"long alloc":    append(append([]byte(nil), alloc...), 0),
		"unknown kind":  append([]byte("XDLM\x09\x00\x00\x00"), make([]byte, 16)...),
		"release n=0":   append([]byte("XDLM\x03\x00\x00\x00"), rel[8:]...),
		"release n>len": append([]byte("XDLM\x03\x00\x00\x04"), rel[8:]...),
		"revoke with n": []byte("XDLM\x04\x00\x00\x01"),
	} {
		var m Msg
		if err := Decode(b, &m); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzDecode: the decoder never panics, and whatever it accepts encodes
// back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMsgs {
		f.Add(Append(nil, &m))
	}
	f.Add([]byte("XDLM\x03\x00\x00\xc9"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Msg
		if err := Decode(b, &m); err != nil {
			return
		}
		if out := Append(nil, &m); !bytes.Equal(out, b) {
			t.Fatalf("%x decodes to %v, which encodes to %x", b, &m, out)
		}
		_ = m.String()
	})
}
