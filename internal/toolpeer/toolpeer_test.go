package toolpeer

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// toolPair is two Peers on two roce devices joined by link/pipe.
func toolPair(t *testing.T) (a, b *Peer) {
	t.Helper()
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(l *pipe.Link, ip string) *Peer {
		d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{netip.MustParseAddr(ip)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd := d.AllocPD()
		cq, err := d.CreateCQ(1024)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 256, MaxRecvWR: 256})
		if err != nil {
			t.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, 1<<17), roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		return &Peer{QP: q, CQ: cq, MR: m, GID: cm.GIDFromAddr(netip.MustParseAddr(ip))}
	}
	return mk(la, "198.51.100.1"), mk(lb, "198.51.100.2")
}

func TestPeerPingpong(t *testing.T) {
	for _, size := range []int{64, 3000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, b := toolPair(t)
			c, s := testenv.TCPPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			var sr PingpongResult
			go func() {
				var err error
				sr, err = b.Pingpong(ctx, s, false, size, 20)
				errc <- err
			}()
			cr, err := a.Pingpong(ctx, c, true, size, 20)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if cr.Remote != sr.Local || sr.Remote != cr.Local {
				t.Errorf("addresses: client %v/%v, server %v/%v", cr.Local, cr.Remote, sr.Local, sr.Remote)
			}
			lines := cr.Lines()
			if !strings.HasPrefix(lines[2], fmt.Sprintf("%d bytes in ", 2*size*20)) || !strings.HasPrefix(lines[3], "20 iters in ") ||
				lines[1] != "  remote address: "+cr.Remote.String() {
				t.Errorf("lines %q", lines)
			}
		})
	}
}

func TestPeerPerftest(t *testing.T) {
	for _, tc := range []struct {
		test cm.PerftestTest
		op   AtomicOp
		size int
	}{{cm.WriteBW, "", 4096}, {cm.ReadBW, "", 65536}, {cm.SendBW, "", 4096}, {cm.AtomicBW, FetchAndAdd, 8}, {cm.AtomicBW, CmpAndSwap, 8}, {cm.SendLat, "", 64}} {
		t.Run(fmt.Sprintf("%v%s", tc.test, tc.op), func(t *testing.T) {
			a, b := toolPair(t)
			if tc.test == cm.ReadBW {
				copy(b.MR.Bytes(), strings.Repeat("read me ", 8192))
			}
			if tc.test == cm.WriteBW || tc.test == cm.SendBW {
				copy(a.MR.Bytes(), strings.Repeat("sent on ", 8192))
			}
			c, s := testenv.TCPPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			var sr PerftestResult
			go func() {
				var err error
				sr, err = b.Perftest(ctx, s, false, tc.test, tc.size, 50, 3, tc.op)
				errc <- err
			}()
			cr, err := a.Perftest(ctx, c, true, tc.test, tc.size, 50, 3, tc.op)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if cr.Remote != sr.Local || sr.Remote != cr.Local || cr.MTU != 3 {
				t.Errorf("keys: client saw %+v, server is %+v (mtu %d)", cr.Remote, sr.Local, cr.MTU)
			}
			if tc.test.Plan().Reports && (sr.PeerReport.Iters != 50 || sr.PeerReport.BWAvg <= 0) {
				t.Errorf("server got report %+v", sr.PeerReport)
			}
			switch {
			case tc.test == cm.WriteBW || tc.test == cm.SendBW:
				if got, want := string(b.MR.Bytes()[:tc.size]), strings.Repeat("sent on ", tc.size/8); got != want {
					t.Errorf("%v: the server's buffer holds %.32q…, want %.32q…", tc.test, got, want)
				}
			case tc.test == cm.SendLat:
				l := cr.Lines(cm.SendLat)
				if len(cr.Latencies) != 50 || !strings.HasPrefix(l[len(l)-1], " 64      50      ") {
					t.Errorf("%d latencies, last line %q", len(cr.Latencies), l[len(l)-1])
				}
			case tc.test == cm.ReadBW:
				if got := string(a.MR.Bytes()[:16]); got != "read me read me " {
					t.Errorf("READ brought %q", got)
				}
			case tc.test == cm.AtomicBW && tc.op == FetchAndAdd:
				if v := binary.LittleEndian.Uint64(b.MR.Bytes()); v != 50 {
					t.Errorf("50 FETCH_AND_ADD 1 left %d", v)
				}
			case tc.test == cm.AtomicBW && tc.op == CmpAndSwap:
				if v := binary.LittleEndian.Uint64(b.MR.Bytes()); v != 50 {
					t.Errorf("50 CMP_AND_SWAP i→i+1 left %d", v)
				}
			}
		})
	}
}

// The lines of a perftest result are perftest's own: checked against the tools' output in the
// captures' .txt files (in cm/testdata), from the keys and reports in the captures.
func TestPerftestResultLines(t *testing.T) {
	for _, tc := range []struct {
		test       cm.PerftestTest
		pcap, text string
	}{{cm.WriteBW, "write_bw.pcap", "write_bw.txt"}, {cm.ReadBW, "read_bw.pcap", "read_bw.txt"}} {
		segs := pcaptest.TCPExchange(t, "../../cm/testdata/"+tc.pcap, cm.DefaultPort)
		var keys [2]cm.PerftestDest
		var rep []uint64
		for _, s := range segs {
			side := 1
			if s.FromClient {
				side = 0
			}
			if len(s.Data) == cm.PerftestKeyLen && keys[side].QPN == 0 {
				keys[side], _ = cm.UnmarshalPerftestDest(s.Data)
			}
			if len(s.Data) == 8 && s.FromClient {
				rep = append(rep, binary.BigEndian.Uint64(s.Data))
			}
		}
		r := PerftestResult{Local: keys[0], Remote: keys[1], Report: cm.PerftestReport{Size: rep[0], Iters: rep[1],
			BWPeak: math.Float64frombits(rep[2]), BWAvg: math.Float64frombits(rep[3]), MsgRate: math.Float64frombits(rep[4])}}
		txt, err := os.ReadFile("../../cm/testdata/" + tc.text)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range r.Lines(tc.test) {
			if !strings.Contains(string(txt), l+"\n") {
				t.Errorf("%v: line %q is not in %s", tc.test, l, tc.text)
			}
		}
	}
	if got := altHex(0, 6); got != "000000" {
		t.Errorf("altHex(0) = %q, C gives 000000", got)
	}
	st := latencyStats([]time.Duration{3 * time.Microsecond, 1 * time.Microsecond, 2 * time.Microsecond})
	if st[0] != 1 || st[1] != 3 || st[2] != 2 || st[3] != 2 || st[6] != 3 {
		t.Errorf("latency stats %v", st)
	}
}
