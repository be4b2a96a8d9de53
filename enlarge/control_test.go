package enlarge

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestControlEncoding(t *testing.T) {
	req := AppendReq(nil, Req{Phase: 1, Size: 5000})
	// magic "XDEN", type 1, version 1, reserved, phase 1, size 5000
	if got, want := hex.EncodeToString(req), "5844454e01010000"+"00000001"+"00001388"; got != want {
		t.Errorf("ENLARGE_REQ = %s, want %s", got, want)
	}
	ack := AppendAck(nil, Ack{Addr: 0x1122334455667788, RKey: 0xAABBCCDD, Length: 8192, Phase: 1})
	want := "5844454e02010000" + "1122334455667788" + "aabbccdd" + "00002000" + "00000001" + "7a11f1a6"
	if got := hex.EncodeToString(ack); got != want {
		t.Errorf("ENLARGE_ACK = %s, want %s", got, want)
	}
	r, ok := ParseReq(req)
	if !ok || r != (Req{Phase: 1, Size: 5000}) {
		t.Errorf("ParseReq = %+v, %v", r, ok)
	}
	a, ok := ParseAck(ack)
	if diff := cmp.Diff(Ack{Addr: 0x1122334455667788, RKey: 0xAABBCCDD, Length: 8192, Phase: 1}, a); !ok || diff != "" {
		t.Errorf("ParseAck ok=%v (-want +got):\n%s", ok, diff)
	}
	for i := range ack {
		bad := append([]byte(nil), ack...)
		bad[i] ^= 0x40
		if _, ok := ParseAck(bad); ok && (i < 8 || i >= 28) {
			t.Errorf("ack with byte %d flipped accepted", i)
		}
	}
	if _, ok := ParseReq(req[:15]); ok {
		t.Error("short request accepted")
	}
}

func TestDescribeControl(t *testing.T) {
	ack := AppendAck(nil, Ack{Addr: 0x10000, RKey: 0x1234, Length: 8192, Phase: 1})
	for _, tc := range []struct {
		in   []byte
		want string
		ok   bool
	}{
		{AppendReq(nil, Req{Phase: 2, Size: 20000}), "ENLARGE_REQ phase=2 size=20000", true},
		{ack, "ENLARGE_ACK addr=0x10000 rkey=0x1234 len=8192 phase=1", true},
		{append(ack[:28:28], 0, 0, 0, 0), "ENLARGE_ACK (incomplete: no tail)", true},
		{ack[:20], "ENLARGE_ACK (truncated)", true},
		{func() []byte { b := make([]byte, CreditLen); credit{2, 17}.encode(b); return b }(), "ENLARGE_CREDIT phase=2 consumed=17", true},
		{[]byte("hello, world"), "", false},
		{nil, "", false},
		{[]byte{0x58, 0x44, 0x45, 0x4e, 9, 1, 0, 0}, "ENLARGE control type 9", true},
	} {
		got, ok := DescribeControl(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("DescribeControl(%x) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzDescribeControl(f *testing.F) {
	f.Add(AppendReq(nil, Req{Phase: 1, Size: 1}))
	f.Add(AppendAck(nil, Ack{Addr: 1, RKey: 2, Length: 3, Phase: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := DescribeControl(b)
		if ok != (s != "") {
			t.Fatalf("ok=%v with %q", ok, s)
		}
		if a, ok := ParseAck(b); ok {
			if b2 := AppendAck(nil, a); string(b2) != string(b[:AckLen]) {
				t.Fatalf("ack does not round-trip")
			}
		}
	})
}

// FuzzReceive feeds a channel arbitrary ring contents and immediate data, as
// a broken or hostile peer could: it must fail with an error or carry on,
// never panic.
func FuzzReceive(f *testing.F) {
	f.Add(AppendReq(nil, Req{Phase: 1, Size: 5000}), makeImm(immReq, ReqLen), true)
	f.Add(AppendReq(nil, Req{Phase: 2, Size: 1}), makeImm(immReq, ReqLen), true)
	f.Add([]byte("hello"), makeImm(immData, 5), true)
	f.Add([]byte("hello"), makeImm(immMore, 5), true)
	f.Add([]byte{}, creditImm(0, 3), true)
	f.Add([]byte{}, immAck<<immKindShift|1, true)
	f.Add([]byte("x"), uint32(0), false)
	f.Fuzz(func(t *testing.T, slot []byte, imm uint32, hasImm bool) {
		fa, fb := newFakePair(5)
		defer func() { fa.close(); fb.close() }()
		pool, err := NewPool(fa, 4, 512)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(fa, pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Connect(Endpoint{RingAddr: 1, RingRKey: 1, MailboxAddr: 1, MailboxRKey: 1}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			copy(c.rx.ring.Bytes()[int(c.rx.recvd%uint32(c.rx.slots))*c.rx.slotSize:], slot[:min(len(slot), c.rx.slotSize)])
			c.mu.Lock()
			err = c.complete(&Completion{ID: wrID(idRecv, 0, 0), Kind: CompRecvImm, Imm: imm, HasImm: hasImm})
			c.mu.Unlock()
			if err != nil {
				break
			}
			buf := make([]byte, 300000)
			if _, _, err := c.Recv(buf); err != nil && !errors.Is(err, ErrTransport) && c.err == nil {
				t.Fatalf("Recv: %v", err)
			}
		}
		c.Close()
	})
}
