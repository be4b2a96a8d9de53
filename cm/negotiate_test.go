package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
)

// tagged are an xdproce side's keys: QPN, rkey, VA and GID, and the PSN that tags them.
func tagged(qpn uint32, ip string) PerftestDest {
	d := PerftestDest{OutReads: 16, QPN: qpn, RKey: 0x1000 + qpn, VAddr: 0x7f0000000000 + uint64(qpn)<<12, GID: GIDFromAddr(netip.MustParseAddr(ip))}
	d.PSN = TagPSN(d.QPN, d.GID, d.RKey, d.VAddr)
	return d
}

// taggedPP is the same for the pingpong exchange, whose message has no rkey or VA.
func taggedPP(qpn uint32, ip string) PingpongDest {
	d := PingpongDest{QPN: qpn, GID: GIDFromAddr(netip.MustParseAddr(ip))}
	d.PSN = TagPSN(d.QPN, d.GID, 0, 0)
	return d
}

// runBoth runs client and server at once and returns their errors.
func runBoth(client, server func() error) (cerr, serr error) {
	errc := make(chan error, 1)
	go func() { errc <- server() }()
	cerr = client()
	return cerr, <-errc
}

// negotiateOnce runs one exchange of kind ("perftest" or "pingpong") with tagged keys on both
// sides, each with its Negotiation, and returns both errors; the client closes its connection
// when it returns, as its process would.
func negotiateOnce(ctx context.Context, kind string, c, s net.Conn, cn, sn *Negotiation) (cerr, serr error) {
	if kind == "perftest" {
		return runBoth(func() error {
			defer c.Close()
			_, _, err := NewPerftestConn(cn.Conn(c), true).Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: tagged(0x11, "198.51.100.2")})
			return err
		}, func() error {
			_, _, err := NewPerftestConn(sn.Conn(s), false).Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: tagged(0x12, "198.51.100.1")})
			return err
		})
	}
	return runBoth(func() error {
		defer c.Close()
		_, err := DialPingpong(ctx, cn.Conn(c), taggedPP(0x11, "198.51.100.2"))
		return err
	}, func() error {
		_, err := ServePingpong(ctx, sn.Conn(s), taggedPP(0x12, "198.51.100.1"), func(PingpongDest) error {
			return errors.New("connect called: the agreement comes first")
		})
		return err
	})
}

// TestNegotiateAgree: two xdproce ends of the perftest and the pingpong exchange recognise
// each other by their PSNs and agree: a value only the client gives is taken, one only the
// server gives is taken, and with neither the client's; then the stock exchange runs again on
// the same connection.
func TestNegotiateAgree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, kind := range []string{"perftest", "pingpong"} {
		t.Run(kind, func(t *testing.T) {
			srvP := BenchParams{Op: kind, Size: 65536, Iters: 64, QPs: 1, Set: []string{"iters"}}
			cliP := BenchParams{Op: kind, Size: 4096, Iters: 5000, QPs: 2, Set: []string{"size"}}
			want := BenchParams{Op: kind, Size: 4096, Iters: 64, QPs: 2}
			c, s := testenv.TCPPair(t)
			stock := func() error { return errors.New("Stock called") }
			cerr, serr := runBoth(func() error {
				if kind == "perftest" {
					_, _, err := NewPerftestConn((&Negotiation{Local: cliP, Stock: stock}).Conn(c), true).Setup(ctx, WriteBW,
						PerftestSetup{MTU: 3, Local: tagged(0x11, "198.51.100.2")})
					return err
				}
				_, err := DialPingpong(ctx, (&Negotiation{Local: cliP, Stock: stock}).Conn(c), taggedPP(0x11, "198.51.100.2"))
				return err
			}, func() error {
				if kind == "perftest" {
					_, _, err := NewPerftestConn((&Negotiation{Local: srvP, Stock: stock}).Conn(s), false).Setup(ctx, WriteBW,
						PerftestSetup{MTU: 3, Local: tagged(0x12, "198.51.100.1")})
					return err
				}
				_, err := ServePingpong(ctx, (&Negotiation{Local: srvP, Stock: stock}).Conn(s), taggedPP(0x12, "198.51.100.1"), nil)
				return err
			})
			for who, err := range map[string]error{"client": cerr, "server": serr} {
				var ae *AgreedError
				if !errors.As(err, &ae) || fmt.Sprint(ae.Params) != fmt.Sprint(want) {
					t.Fatalf("%s: %v, want agreement on %+v", who, err, want)
				}
			}
			// The exchange again, stock, on the same connection: each side learns the other's keys.
			if kind == "perftest" {
				var srvSaw PerftestDest
				cerr, serr = runBoth(func() error {
					pc := NewPerftestConn(c, true)
					if _, _, err := pc.Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: tagged(0x21, "198.51.100.2")}); err != nil {
						return err
					}
					_, err := pc.Finish(ctx, WriteBW, tagged(0x21, "198.51.100.2"), PerftestReport{Size: 4096, Iters: 64})
					return err
				}, func() (err error) {
					pc := NewPerftestConn(s, false)
					if srvSaw, _, err = pc.Setup(ctx, WriteBW, PerftestSetup{MTU: 3, Local: tagged(0x22, "198.51.100.1")}); err != nil {
						return err
					}
					_, err = pc.Finish(ctx, WriteBW, tagged(0x22, "198.51.100.1"), PerftestReport{})
					return err
				})
				if cerr != nil || serr != nil || srvSaw != tagged(0x21, "198.51.100.2") {
					t.Fatalf("the exchange after the agreement: client %v, server %v, server saw %+v", cerr, serr, srvSaw)
				}
				return
			}
			var cliSaw PingpongDest
			cerr, serr = runBoth(func() (err error) {
				cliSaw, err = DialPingpong(ctx, c, taggedPP(0x21, "198.51.100.2"))
				return err
			}, func() error {
				_, err := ServePingpong(ctx, s, taggedPP(0x22, "198.51.100.1"), nil)
				return err
			})
			if cerr != nil || serr != nil || cliSaw != taggedPP(0x22, "198.51.100.1") {
				t.Fatalf("the exchange after the agreement: client %v, server %v, client saw %v", cerr, serr, cliSaw)
			}
		})
	}
}

// TestNegotiateMismatch: a value given on both sides that differs ends both sides at once,
// each with one line naming both values; the client's line is the server's words.
func TestNegotiateMismatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srv, cli BenchParams
		want     string
	}{
		{"size", BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Set: []string{"size"}},
			BenchParams{Op: "write", Size: 3000, Iters: 10, QPs: 1, Set: []string{"size"}}, "client --size 3000, server --size 4096"},
		{"iters+qps", BenchParams{Op: "write", Size: 64, Iters: 500, QPs: 1, Set: []string{"iters", "qps"}},
			BenchParams{Op: "write", Size: 64, Iters: 300, QPs: 2, Set: []string{"iters", "qps"}}, "client --iters 300, server --iters 500; client --qps 2, server --qps 1"},
		{"op", BenchParams{Op: "read", Size: 64, Iters: 10, QPs: 1},
			BenchParams{Op: "write", Size: 64, Iters: 10, QPs: 1}, `the client runs "write", this server "read"`},
		{"sweep+size", BenchParams{Op: "write", Size: 4096, Iters: 10, QPs: 1, Set: []string{"size"}},
			BenchParams{Op: "write", Size: 2, Iters: 10, QPs: 1, Sweep: true, Set: []string{"sweep"}}, "a size sweep (-a) and a size (--size)"},
		{"seconds+iters", BenchParams{Op: "write", Size: 64, Iters: 500, QPs: 1, Set: []string{"iters"}},
			BenchParams{Op: "write", Size: 64, Iters: 10, QPs: 1, Seconds: 5, Set: []string{"seconds"}}, "a duration (-D) and this server's --iters"},
	} {
		for _, kind := range []string{"perftest", "pingpong"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, s := testenv.TCPPair(t)
				start := time.Now()
				cerr, serr := negotiateOnce(ctx, kind, c, s, &Negotiation{Local: tc.cli}, &Negotiation{Local: tc.srv})
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("took %v", d)
				}
				if !errors.Is(serr, ErrParamMismatch) || !strings.Contains(serr.Error(), tc.want) {
					t.Errorf("server: %v, want %v with %q", serr, ErrParamMismatch, tc.want)
				}
				if cerr == nil || !strings.HasPrefix(cerr.Error(), "server: parameters differ: ") || !strings.Contains(cerr.Error(), tc.want) {
					t.Errorf("client: %v, want the server's line", cerr)
				}
				for _, err := range []error{cerr, serr} {
					if err != nil && strings.Contains(err.Error(), "\n") {
						t.Errorf("%q is more than one line", err)
					}
				}
			})
		}
	}
}

// TestNegotiateStockUnchanged: with a Negotiation on the connection, xdproce against the
// recorded perftest and rdma-core tools (their PSNs are not tags) writes exactly the bytes of
// the capture, in the same writes, and reports the peer as stock; nothing extra goes out.
func TestNegotiateStockUnchanged(t *testing.T) {
	for _, tc := range []struct {
		file string
		test PerftestTest
	}{{"write_bw.pcap", WriteBW}, {"read_bw.pcap", ReadBW}, {"send_bw.pcap", SendBW}, {"atomic_bw_faa.pcap", AtomicBW}, {"send_lat_lo.pcap", SendLat}} {
		segs := capturedExchange(t, tc.file)
		keys, reports, _ := capturedKeys(t, segs)
		for _, client := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/client=%v", tc.test, client), func(t *testing.T) {
				me := map[bool]int{true: 0, false: 1}[client]
				c, s := testenv.TCPPair(t)
				mine, peer := s, c
				if client {
					mine, peer = c, s
				}
				w := &writeLog{Conn: mine}
				stock := 0
				n := &Negotiation{Local: BenchParams{Op: "write", Size: 1, Iters: 1, QPs: 1, Set: []string{"size", "iters", "qps"}},
					Stock: func() error { stock++; return nil }}
				errc := make(chan error, 1)
				go func() { errc <- replay(peer, segs, !client) }()
				pc := NewPerftestConn(n.Conn(w), client)
				pc.Timeout = 5 * time.Second
				if _, _, err := pc.Setup(context.Background(), tc.test, PerftestSetup{MTU: 3, Local: keys[me]}); err != nil {
					t.Fatal(err)
				}
				if _, err := pc.Finish(context.Background(), tc.test, keys[me], reports[me]); err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				if stock != 1 {
					t.Errorf("Stock called %d times, want once", stock)
				}
				checkWrites(t, w, segs, client)
			})
		}
	}
	for _, file := range []string{"rc_pingpong.pcap", "host_peer_rc_pingpong.pcap"} {
		segs := capturedExchange(t, file)
		cli, _ := UnmarshalPingpongDest(segs[0].Data)
		srv, _ := UnmarshalPingpongDest(segs[1].Data)
		t.Run(file, func(t *testing.T) {
			n := &Negotiation{Local: BenchParams{Op: "pingpong", Size: 1, Iters: 1, QPs: 1, Set: []string{"size"}}}
			c, s := testenv.TCPPair(t)
			w := &writeLog{Conn: c}
			errc := make(chan error, 1)
			go func() { errc <- replay(s, segs, false) }()
			if _, err := DialPingpong(context.Background(), n.Conn(w), cli); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			checkWrites(t, w, segs, true)
			c, s = testenv.TCPPair(t)
			w = &writeLog{Conn: s}
			go func() { errc <- replay(c, segs, true) }()
			if _, err := ServePingpong(context.Background(), n.Conn(w), srv, nil); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			checkWrites(t, w, segs, false)
		})
	}
}

// TestNegotiateHelloVersion: a hello of another version is refused with a line saying so.
func TestNegotiateHelloVersion(t *testing.T) {
	c, s := testenv.TCPPair(t)
	go func() {
		buf := make([]byte, PingpongMsgLen)
		if _, err := s.Read(buf); err == nil {
			h := benchHello(PingpongMsgLen)
			copy(h[len(benchHelloMagic):], "2")
			s.Write(h)
		}
	}()
	n := &Negotiation{Local: BenchParams{Op: "pingpong", Size: 1, Iters: 1, QPs: 1}}
	_, err := DialPingpong(context.Background(), n.Conn(c), PingpongDest{QPN: 1, PSN: 1})
	if err == nil || !strings.Contains(err.Error(), `version "2", this side 1`) {
		t.Errorf("got %v", err)
	}
}
