package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// stockPair is two devices joined by link/pipe (198.51.100.1 and .2) and a
// stock tool peer (random PSN, as perftest and ibv_rc_pingpong pick) on the
// second, with a buffer of bufLen bytes.
func stockPair(t *testing.T, bufLen int) (*roce.Device, *toolpeer.Peer) {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var devs [2]*roce.Device
	for i, l := range []*pipe.Link{la, lb} {
		devs[i], err = roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)})}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	pd := devs[1].AllocPD()
	cq, err := devs[1].CreateCQ(1024)
	if err != nil {
		t.Fatal(err)
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 256, MaxRecvWR: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.RegMR(make([]byte, bufLen), roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return devs[0], &toolpeer.Peer{QP: q, CQ: cq, MR: m, GID: cm.GIDFromAddr(netip.MustParseAddr("198.51.100.2"))}
}

// TestStockPeerBounded: against a stock tool given other values (which no
// agreement can catch), an xdproce side ends with the budget's error
// instead of waiting forever: a send server expecting more messages than
// the client sends, and a pingpong client whose server dropped out over a
// size it did not expect (the pingpong help's pair with ibv_rc_pingpong).
func TestStockPeerBounded(t *testing.T) {
	env := &Env{Stdout: io.Discard, Stderr: io.Discard}
	t.Run("send-server", func(t *testing.T) {
		t.Parallel()
		dev, stock := stockPair(t, 1<<16)
		b := &bench{env: env, dev: dev, test: cm.SendBW, name: "send", size: 1000, iters: 500, qps: 1,
			set: []string{"iters", "size"}, sgid: netip.MustParseAddr("198.51.100.1"), mtu: roce.MTU1024, budgetBase: 2 * time.Second}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		errc := make(chan error, 1)
		start := time.Now()
		go func() { _, err := b.serve(ctx, ln); errc <- err }()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go stock.Perftest(ctx, conn, true, cm.SendBW, 1000, 300, 3, "")
		err = <-errc
		took := time.Since(start)
		if !errors.Is(err, errBudget) || !strings.Contains(err.Error(), "no result within 3s, the time allowed for 500 × 1000 B") {
			t.Errorf("server: %v, want the budget's error", err)
		}
		if budget := runBudget(b.budgetBase, 1000, 500, 1); took > budget+5*time.Second {
			t.Errorf("server ended after %v, budget %v", took, budget)
		}
	})
	t.Run("pingpong-client", func(t *testing.T) {
		t.Parallel()
		dev, stock := stockPair(t, 2*4096)
		p := &pingpong{env: env, dev: dev, size: 3000, iters: 20, mtu: roce.MTU1024, sgid: netip.MustParseAddr("198.51.100.1"), set: []string{"size"},
			budgetBase: 2 * time.Second}
		c, s := net.Pipe()
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		serr := make(chan error, 1)
		go func() { _, err := stock.Pingpong(ctx, s, false, 4096, 20); serr <- err }()
		start := time.Now()
		_, err := p.agreeAndRun(ctx, c, true)
		took := time.Since(start)
		if !errors.Is(err, errBudget) {
			t.Errorf("client: %v, want the budget's error", err)
		}
		if budget := runBudget(p.budgetBase, 3000, 20, 1); took > budget+5*time.Second {
			t.Errorf("client ended after %v, budget %v", took, budget)
		}
		if err := <-serr; err == nil || !strings.Contains(err.Error(), "received 3000 bytes, want 4096") {
			t.Errorf("stock server: %v", err)
		}
	})
}
