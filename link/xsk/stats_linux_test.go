package xsk_test

import (
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
)

// TestPrivilegedMultiQueueStats: frames sent at a socket that does not
// receive, beyond its 64 receive chunks, show up in its statistics as drops
// (rx_dropped or rx_ring_full, whichever the kernel counts), and a 4-queue
// device's MultiQueue.Stats is its sockets' Stats summed.
func TestPrivilegedMultiQueueStats(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{Queues: 4})
	a := openEnd(t, topo.A, bpf.ModeNative, nil)
	b := openEnd(t, topo.B, bpf.ModeNative, &xsk.Config{RxChunks: 64})
	l, err := b.Dev.Link()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	mq, ok := l.(*xsk.MultiQueue)
	if !ok {
		t.Fatalf("Device.Link() of %d sockets is a %T, want *xsk.MultiQueue", len(b.Dev.Sockets), l)
	}
	const n = 1000
	bufs := make([][]byte, 64)
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; sent < n; {
		if time.Now().After(deadline) {
			t.Fatalf("sent %d of %d frames in 10 s", sent, n)
		}
		k := a.Sock.Alloc(bufs[:min(len(bufs), n-sent)])
		for i := range k {
			bufs[i] = putRoCE(bufs[i], a.If, b.If, uint32(sent+i), 128)
		}
		if err := a.Sock.Send(bufs[:k]); err != nil {
			t.Fatal(err)
		}
		sent += k
		if k == 0 {
			a.Sock.Wait(time.Millisecond) // completions come back
		}
	}
	// The receive drops summed over the sockets (rx_dropped, rx_ring_full,
	// fill ring empty): the kernel counts as the frames arrive, so wait for
	// drops, then for two equal readings (nothing more in flight).
	var sum, prev [3]uint64
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no drops counted after %d frames at 64 receive chunks: %v", n, sum)
		}
		sum = [3]uint64{}
		for _, s := range b.Dev.Sockets {
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			sum[0] += st.Rx_dropped
			sum[1] += st.Rx_ring_full
			sum[2] += st.Rx_fill_ring_empty_descs
		}
		if sum[0]+sum[1] > 0 && sum == prev {
			break
		}
		prev = sum
		time.Sleep(20 * time.Millisecond)
	}
	got, err := mq.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if g := [3]uint64{got.Rx_dropped, got.Rx_ring_full, got.Rx_fill_ring_empty_descs}; g != sum {
		t.Fatalf("MultiQueue.Stats: rx_dropped, rx_ring_full, fill ring empty %v; the sockets' summed %v", g, sum)
	}
	t.Logf("%d frames at a socket that did not receive: %+v", n, got)
}
