package am_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/am"
)

// TestCall: a registered handler runs on the target only inside its
// Progress and its reply comes back; an unregistered id, a reply longer
// than the caller's buffer and a reserved id are refused.
func TestCall(t *testing.T) {
	p := newPair(t, propCfg)
	const upper = am.HUser + 1
	var ran int
	if err := p.b.ep.Register(upper, func(in []byte) []byte { ran++; return bytes.ToUpper(in) }); err != nil {
		t.Fatal(err)
	}
	if err := p.b.ep.Register(am.HWrite, func([]byte) []byte { return nil }); err == nil {
		t.Error("a built-in id was registered")
	}
	reply := make([]byte, 16)
	h, err := p.a.ep.Call(upper, []byte("hello"), reply)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if err := p.a.ep.Progress(); err != nil {
			t.Fatal(err)
		}
	}
	if ran != 0 || h.Done() {
		t.Fatalf("without the target's Progress: handler ran %d times, done %v", ran, h.Done())
	}
	p.drive(t, h)
	if err := h.Err(); err != nil || string(reply[:h.Len()]) != "HELLO" || ran != 1 {
		t.Fatalf("call: %v, reply %q, ran %d", err, reply[:h.Len()], ran)
	}
	h, _ = p.a.ep.Call(upper, bytes.Repeat([]byte("x"), 17), reply)
	p.drive(t, h)
	if err := h.Err(); !errors.Is(err, am.ErrBadRequest) {
		t.Errorf("17-byte reply into 16 bytes: %v", err)
	}
	h, _ = p.a.ep.Call(am.HUser+9, nil, reply)
	p.drive(t, h)
	if err := h.Err(); !errors.Is(err, am.ErrUnknownHandler) {
		t.Errorf("unregistered handler: %v", err)
	}
	if _, err := p.a.ep.Call(am.HDone, nil, nil); err == nil {
		t.Error("a call of a built-in id was queued")
	}
	if _, err := p.a.ep.Call(upper, make([]byte, propCfg.Inline+1), nil); err == nil {
		t.Error("a payload over Inline was queued")
	}
}
