package am_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/am"
)

func TestConfigLimits(t *testing.T) {
	for _, c := range []am.Config{{Inline: -1}, {Depth: -1}, {Depth: 5000}, {MaxRMA: -2}, {Inline: 2 << 20}} {
		if _, _, _, err := c.QueueDepths(); err == nil || !strings.HasPrefix(err.Error(), "am: config: ") {
			t.Errorf("%+v: %v, want a config error", c, err)
		}
	}
	s, r, cq, err := am.Config{}.QueueDepths()
	if err != nil || s != 2*am.DefaultDepth+am.DefaultMaxRMA || r != 2*am.DefaultDepth || cq != s+r {
		t.Errorf("defaults: %d, %d, %d, %v", s, r, cq, err)
	}
}

// TestUnexpose: a withdrawn window is refused like one never exposed; an id
// cannot be exposed twice.
func TestUnexpose(t *testing.T) {
	p := newPair(t, propCfg)
	win := make([]byte, 4096)
	if err := p.b.ep.Expose(1, win); err != nil {
		t.Fatal(err)
	}
	if err := p.b.ep.Expose(1, win); err == nil {
		t.Error("window 1 exposed twice")
	}
	if err := p.b.ep.Expose(2, nil); err == nil {
		t.Error("empty window exposed")
	}
	h, _ := p.a.ep.Write(1, 0, []byte("before"))
	p.drive(t, h)
	if err := p.b.ep.Unexpose(1); err != nil {
		t.Fatal(err)
	}
	if err := p.b.ep.Unexpose(1); !errors.Is(err, am.ErrUnknownWindow) {
		t.Errorf("second Unexpose: %v", err)
	}
	h, _ = p.a.ep.Write(1, 0, []byte("after!"))
	p.drive(t, h)
	if err := h.Err(); !errors.Is(err, am.ErrUnknownWindow) || string(win[:6]) != "before" {
		t.Errorf("write to a withdrawn window: %v, window %q", err, win[:6])
	}
}

// TestFatalCompletion: when the queue pair fails (here: destroyed), Progress
// returns the error, every incomplete operation fails with ErrClosed, and
// new ones are refused.
func TestFatalCompletion(t *testing.T) {
	p := newPair(t, propCfg)
	if err := p.b.ep.Expose(1, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	h, _ := p.a.ep.Write(1, 0, make([]byte, 3000))
	if err := p.a.ep.Progress(); err != nil { // the request goes out
		t.Fatal(err)
	}
	queued, _ := p.a.ep.Read(1, 0, make([]byte, 10))
	if err := p.a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 1000 {
		if err = p.a.ep.Progress(); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "IBV_WC_WR_FLUSH_ERR") {
		t.Fatalf("Progress after the queue pair died: %v", err)
	}
	for _, x := range []*am.Handle{h, queued} {
		if !x.Done() || !errors.Is(x.Err(), am.ErrClosed) {
			t.Errorf("operation: done %v, %v", x.Done(), x.Err())
		}
	}
	if _, err := p.a.ep.Write(1, 0, nil); !errors.Is(err, am.ErrClosed) {
		t.Errorf("Write after failure: %v", err)
	}
}
