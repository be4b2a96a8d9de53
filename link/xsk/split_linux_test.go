package xsk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/xsk"
)

// TestPrivilegedSplit: a MultiQueue over the 4 queues of a veth end splits
// into 2 parts of 2 sockets (queues 0 and 2, 1 and 3) or into its 4
// sockets, and no other way. With native XDP what part j of one end sends
// (on its first socket's queue) arrives at the peer's part j alone: veth
// keeps the queue index. Closing the MultiQueue closes the parts.
func TestPrivilegedSplit(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{Queues: 4})
	var mq [2]*xsk.MultiQueue
	for i, e := range []*netlab.Iface{topo.A, topo.B} {
		end := openEnd(t, e, bpf.ModeNative, nil)
		l, err := end.Dev.Link()
		if err != nil {
			t.Fatal(err)
		}
		mq[i] = l.(*xsk.MultiQueue)
		t.Cleanup(func() { l.Close() })
	}
	if n := mq[0].Queues(); n != 4 {
		t.Fatalf("Queues() = %d, want 4", n)
	}
	for _, n := range []int{0, 5} {
		if _, err := mq[0].Split(n); err == nil {
			t.Errorf("Split(%d) of 4 sockets: no error", n)
		}
	}
	if parts, err := mq[0].Split(4); err != nil {
		t.Fatal(err)
	} else {
		for i, p := range parts {
			if s, ok := p.(*xsk.Socket); !ok || s.Queue() != i {
				t.Errorf("Split(4) part %d is %T, want the socket of queue %d", i, p, i)
			}
		}
	}
	var parts [2][]link.Link
	for i := range mq {
		var err error
		if parts[i], err = mq[i].Split(2); err != nil {
			t.Fatal(err)
		}
		if len(parts[i]) != 2 {
			t.Fatalf("Split(2): %d parts", len(parts[i]))
		}
	}
	const n = 200
	buf := make([]byte, 2048)
	rx := make([][]byte, 64)
	for j := range 2 {
		from, to, other := parts[0][j], parts[1][j], parts[1][1-j]
		bufs := make([][]byte, 1)
		for seq := range n {
			if from.Alloc(bufs) != 1 {
				from.Wait(time.Millisecond)
				if from.Alloc(bufs) != 1 {
					t.Fatalf("part %d: no transmit buffer", j)
				}
			}
			f := putRoCE(buf, topo.A, topo.B, uint32(seq), 300)
			bufs[0] = append(bufs[0][:0], f...)
			if err := from.Send(bufs); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		deadline := time.Now().Add(5 * time.Second)
		for got < n && time.Now().Before(deadline) {
			to.Wait(10 * time.Millisecond)
			k, err := to.Receive(rx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rx[:k] {
				if seq, ok := checkRoCE(f, 300); !ok || seq != uint32(got) {
					t.Fatalf("part %d: frame %d: seq %d ok %v", j, got, seq, ok)
				}
				got++
			}
		}
		if got != n {
			t.Fatalf("part %d: %d of %d frames arrived at the peer's part %d", j, got, n, j)
		}
		if k, _ := other.Receive(rx); k != 0 {
			t.Errorf("part %d's frames: %d arrived at the peer's part %d", j, k, 1-j)
		}
	}
	mq[1].Close()
	for j, p := range parts[1] {
		if err := p.Wait(0); !errors.Is(err, link.ErrClosed) {
			t.Errorf("part %d after the MultiQueue closed: Wait = %v", j, err)
		}
	}
}
