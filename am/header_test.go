package am

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Handler: HWrite, Tag: 1, Window: 7, Len: 100, Off: 0x3e8},
		{Handler: HRead, Flags: FlagRMA, Tag: 1<<64 - 1, Window: 1<<32 - 1, Len: 1<<32 - 1, Off: 1<<64 - 1},
		{Handler: HNAK, Status: StatusOutOfRange, Tag: 9},
	} {
		b := make([]byte, HeaderLen)
		h.Put(b)
		got, ok := ParseHeader(b)
		if !ok {
			t.Fatalf("%+v does not parse back", h)
		}
		if d := cmp.Diff(h, got); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
	d := RMADesc{Addr: 0x7f0000002000, RKey: 0x4d7c0310}
	b := make([]byte, HeaderLen+rmaDescLen)
	(&Header{Handler: HWriteRTS}).Put(b)
	d.Put(b[HeaderLen:])
	if got, ok := ParseRMADesc(b); !ok || got != d {
		t.Errorf("descriptor %+v, %v; want %+v", got, ok, d)
	}
	if _, ok := ParseHeader(b[:HeaderLen-1]); ok {
		t.Error("a 31-byte message parsed")
	}
	b[0] = 'Y'
	if _, ok := ParseHeader(b); ok {
		t.Error("a message without the magic parsed")
	}
}

func TestDescribe(t *testing.T) {
	b := make([]byte, HeaderLen+rmaDescLen)
	for _, c := range []struct {
		h    Header
		n    int
		want string
	}{
		{Header{Handler: HWriteRTS, Tag: 1, Window: 7, Off: 1000, Len: 3000}, HeaderLen + rmaDescLen,
			"AM_WRITE_RTS tag=1 win=7 off=0x3e8 len=3000 addr=0x2000 rkey=0x1234"},
		{Header{Handler: HRead, Flags: FlagRMA, Tag: 2, Len: 9000}, HeaderLen,
			"AM_READ tag=2 win=0 off=0x0 len=9000 (no rma descriptor)"},
		{Header{Handler: HNAK, Status: StatusUnknownWindow, Tag: 3, Window: 99}, HeaderLen,
			"AM_NAK tag=3 win=99 off=0x0 len=0 status=unknown window"},
		{Header{Handler: 77}, HeaderLen, "AM_77 tag=0 win=0 off=0x0 len=0"},
	} {
		c.h.Put(b)
		RMADesc{Addr: 0x2000, RKey: 0x1234}.Put(b[HeaderLen:])
		if got, ok := Describe(b[:c.n]); !ok || got != c.want {
			t.Errorf("Describe = %q, %v; want %q", got, ok, c.want)
		}
	}
}

// FuzzHandle feeds arbitrary messages to a target's handlers: none panics,
// and the window changes only by an AM_WRITE the header admits (its range
// then holds the payload).
func FuzzHandle(f *testing.F) {
	seed := make([]byte, HeaderLen+8)
	(&Header{Handler: HWrite, Window: 7, Off: 8, Len: 8}).Put(seed)
	f.Add(seed)
	(&Header{Handler: HWriteRTS, Window: 7, Len: 100}).Put(seed)
	f.Add(seed)
	(&Header{Handler: HRead, Window: 7, Off: 1 << 40, Len: 4}).Put(seed)
	f.Add(seed)
	f.Add([]byte("XDAM"))
	l := newLab(f)
	win := make([]byte, 64)
	if err := l.b.ep.Expose(7, win); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ep := l.b.ep
		clear(win)
		ep.replies, ep.rmaQ = nil, nil
		ep.windows[7].busy = 0
		ep.handle(msg)
		h, ok := ParseHeader(msg)
		admitted := ok && h.Handler == HWrite && h.Window == 7 && h.Off <= 64 && uint64(h.Len) <= 64-h.Off &&
			len(msg)-HeaderLen == int(h.Len)
		if admitted {
			if !bytes.Equal(win[h.Off:h.Off+uint64(h.Len)], msg[HeaderLen:]) {
				t.Fatal("an admitted write did not land")
			}
		} else if !allZero(win) {
			t.Fatalf("the window changed by %x", msg)
		}
		if len(ep.replies)+len(ep.rmaQ) > 1 {
			t.Fatalf("%d replies and %d rma operations for one message", len(ep.replies), len(ep.rmaQ))
		}
	})
}
