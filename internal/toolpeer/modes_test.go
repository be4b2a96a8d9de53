package toolpeer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// countConn counts the bytes written and read on a connection.
type countConn struct {
	net.Conn
	w, r atomic.Int64
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.w.Add(int64(n))
	return n, err
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.r.Add(int64(n))
	return n, err
}

// pipeDevices returns two roce devices joined by link/pipe.
func pipeDevices(t *testing.T) (a, b *roce.Device) {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(l *pipe.Link, ip string) *roce.Device {
		d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr(ip)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return mk(la, "198.51.100.1"), mk(lb, "198.51.100.2")
}

func gidOf(t *testing.T, d *roce.Device) cm.GID {
	g, err := d.GID(1)
	if err != nil {
		t.Fatal(err)
	}
	return cm.GIDFromAddr(g)
}

// runBoth runs client and server concurrently within 30 s and fails on either's error.
func runBoth(t *testing.T, client, server func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- server(ctx) }()
	if err := client(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestPeerPingpongUCUD: ibv_uc_pingpong's and ibv_ud_pingpong's runs between two peers: one
// 52-byte address each way and "done", iters messages each way (UD receives of size+40
// bytes, checked by the loop), the tools' four lines.
func TestPeerPingpongUCUD(t *testing.T) {
	for _, tc := range []struct {
		typ  roce.QPType
		size int
	}{{roce.UC, 64}, {roce.UC, 3000}, {roce.UD, 64}, {roce.UD, 1024}} {
		t.Run(fmt.Sprintf("%v-%d", tc.typ, tc.size), func(t *testing.T) {
			da, db := pipeDevices(t)
			mk := func(d *roce.Device) *Peer {
				pd := d.AllocPD()
				cq, err := d.CreateCQ(256)
				if err != nil {
					t.Fatal(err)
				}
				q, err := pd.CreateQP(roce.QPConfig{Type: tc.typ, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 64})
				if err != nil {
					t.Fatal(err)
				}
				m, err := pd.RegMR(make([]byte, 2*tc.size+roce.GRHLen), roce.LocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				o := roce.DefaultConnectOptions()
				o.PathMTU = roce.MTUFromBytes(1024)
				return &Peer{QP: q, CQ: cq, MR: m, GID: gidOf(t, d), Connect: &o}
			}
			a, b := mk(da), mk(db)
			c, s := testenv.TCPPair(t)
			cc := &countConn{Conn: c}
			var cr, sr PingpongResult
			const iters = 30
			runBoth(t, func(ctx context.Context) (err error) {
				cr, err = a.Pingpong(ctx, cc, true, tc.size, iters)
				return err
			}, func(ctx context.Context) (err error) {
				sr, err = b.Pingpong(ctx, s, false, tc.size, iters)
				return err
			})
			if cc.w.Load() != cm.PingpongMsgLen+5 || cc.r.Load() != cm.PingpongMsgLen {
				t.Errorf("client wrote %d and read %d bytes of exchange, want %d and %d", cc.w.Load(), cc.r.Load(), cm.PingpongMsgLen+5, cm.PingpongMsgLen)
			}
			if cr.Remote != sr.Local || sr.Remote != cr.Local {
				t.Errorf("addresses: client %v/%v, server %v/%v", cr.Local, cr.Remote, sr.Local, sr.Remote)
			}
			// An engine adds its counters to the device's at the end of its round, which can
			// come after the application has seen the last completion: wait for it, bounded.
			for _, d := range []*roce.Device{da, db} {
				deadline := time.Now().Add(2 * time.Second)
				st := d.Stats()
				for st.RxFrames < iters && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
					st = d.Stats()
				}
				if st.RxFrames < iters {
					t.Errorf("device received %d frames, want at least %d", st.RxFrames, iters)
				}
			}
			l := cr.Lines()
			if len(l) != 4 || !strings.HasPrefix(l[2], fmt.Sprintf("%d bytes in ", 2*tc.size*iters)) || !strings.HasPrefix(l[3], fmt.Sprintf("%d iters in ", iters)) {
				t.Errorf("lines %q", l)
			}
		})
	}
}

// TestSRQPeerPingpong: ibv_srq_pingpong's run between two peers of 4 queue pairs each on an SRQ
// of 8 receives: 256 address messages each way and "done", one address line per queue pair
// each way matching the other side's, the iterations counted across the queue pairs.
func TestSRQPeerPingpong(t *testing.T) {
	da, db := pipeDevices(t)
	const nqp, rx, size, iters = 4, 8, 2000, 200
	mk := func(d *roce.Device) *SRQPeer {
		pd := d.AllocPD()
		cq, err := d.CreateCQ(rx + nqp)
		if err != nil {
			t.Fatal(err)
		}
		srq, err := pd.CreateSRQ(roce.SRQConfig{MaxWR: rx, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, size), roce.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		p := &SRQPeer{SRQ: srq, CQ: cq, MR: m, GID: gidOf(t, d), RxDepth: rx}
		for range nqp {
			q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxSGE: 1, SRQ: srq})
			if err != nil {
				t.Fatal(err)
			}
			p.QPs = append(p.QPs, q)
		}
		return p
	}
	a, b := mk(da), mk(db)
	c, s := testenv.TCPPair(t)
	cc := &countConn{Conn: c}
	var cr, sr SRQPingpongResult
	runBoth(t, func(ctx context.Context) (err error) {
		cr, err = a.Pingpong(ctx, cc, true, size, iters)
		return err
	}, func(ctx context.Context) (err error) {
		sr, err = b.Pingpong(ctx, s, false, size, iters)
		return err
	})
	const all = cm.SRQPingpongMsgs * cm.PingpongMsgLen
	if cc.w.Load() != all+5 || cc.r.Load() != all {
		t.Errorf("client wrote %d and read %d bytes of exchange, want %d and %d", cc.w.Load(), cc.r.Load(), all+5, all)
	}
	for i := range nqp {
		if cr.Remote[i] != sr.Local[i] || sr.Remote[i] != cr.Local[i] {
			t.Errorf("queue pair %d: client %v/%v, server %v/%v", i, cr.Local[i], cr.Remote[i], sr.Local[i], sr.Remote[i])
		}
	}
	for who, r := range map[string]SRQPingpongResult{"client": cr, "server": sr} {
		l := r.Lines()
		if len(l) != 2*nqp+2 || !strings.HasPrefix(l[0], "  local address:  LID 0x0000, QPN ") ||
			!strings.HasPrefix(l[nqp], "  remote address: LID 0x0000, QPN ") ||
			!strings.HasPrefix(l[2*nqp], fmt.Sprintf("%d bytes in ", 2*size*iters)) ||
			!strings.HasPrefix(l[2*nqp+1], fmt.Sprintf("%d iters in ", iters)) {
			t.Errorf("%s lines %q", who, l)
		}
	}
}
