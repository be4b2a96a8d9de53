package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/internal/testenv"
)

type segment = pcaptest.Segment

// capturedExchange returns the TCP payloads to and from port 18515 in a capture of testdata, in
// order. The captures are real: rxe peers running rdma-core's and perftest's tools (see
// testdata/README).
func capturedExchange(t *testing.T, name string) []segment {
	return pcaptest.TCPExchange(t, "testdata/"+name, DefaultPort)
}

// writeLog records every Write on a connection, so tests can check message boundaries.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeLog) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, append([]byte(nil), b...))
	w.mu.Unlock()
	return w.Conn.Write(b)
}

func (w *writeLog) log() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// replay plays the recorded peer on conn: it writes the peer's segments and checks that what
// arrives from the side under test is byte for byte what the real tool sent.
func replay(conn net.Conn, segs []segment, peerIsClient bool) error {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	for i, s := range segs {
		if s.FromClient == peerIsClient {
			if _, err := conn.Write(s.Data); err != nil {
				return fmt.Errorf("segment %d: write: %v", i, err)
			}
			continue
		}
		got := make([]byte, len(s.Data))
		if _, err := io.ReadFull(conn, got); err != nil {
			return fmt.Errorf("segment %d: read %d bytes: %v", i, len(s.Data), err)
		}
		if !bytes.Equal(got, s.Data) {
			return fmt.Errorf("segment %d differs from the capture:\n got %q\nwant %q", i, got, s.Data)
		}
	}
	return nil
}

// checkWrites compares the Write calls of the side under test with the captured segments.
func checkWrites(t *testing.T, w *writeLog, segs []segment, fromClient bool) {
	t.Helper()
	var want [][]byte
	for _, s := range segs {
		if s.FromClient == fromClient {
			want = append(want, s.Data)
		}
	}
	got := w.log()
	if len(got) != len(want) {
		t.Fatalf("%d writes, the tool made %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("write %d: got %q, want %q", i, got[i], want[i])
		}
	}
}

func TestPingpongGolden(t *testing.T) {
	for _, tc := range []struct {
		file             string
		client, server   PingpongDest
		clientIP, servIP string
	}{
		// rc_pingpong.txt: client QPN 0x11 PSN 0xc829ba on 192.0.2.12, server QPN 0x11 PSN 0x0e1221 on .11
		{"rc_pingpong.pcap", PingpongDest{QPN: 0x11, PSN: 0xc829ba}, PingpongDest{QPN: 0x11, PSN: 0x0e1221}, "192.0.2.12", "192.0.2.11"},
		{"ud_pingpong.pcap", PingpongDest{QPN: 0x14, PSN: 0xf11f78}, PingpongDest{QPN: 0x14, PSN: 0x25539e}, "192.0.2.12", "192.0.2.11"},
		// host_rc_pingpong.py (QPN 0x100) against ibv_rc_pingpong in the guest
		{"host_peer_rc_pingpong.pcap", PingpongDest{QPN: 0x100, PSN: 0xfc424c}, PingpongDest{QPN: 0x21, PSN: 0xdf1802}, "192.0.2.1", "192.0.2.11"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			segs := capturedExchange(t, tc.file)
			if len(segs) != 3 || !segs[0].FromClient || segs[1].FromClient || !segs[2].FromClient {
				t.Fatalf("capture has %d segments, want client, server, client", len(segs))
			}
			tc.client.GID = GIDFromAddr(mustAddr(t, tc.clientIP))
			tc.server.GID = GIDFromAddr(mustAddr(t, tc.servIP))
			for i, want := range []PingpongDest{tc.client, tc.server} {
				got, err := UnmarshalPingpongDest(segs[i].Data)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("message %d: got %v, want %v", i, got, want)
				}
				b, err := want.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, segs[i].Data) || len(b) != PingpongMsgLen {
					t.Errorf("marshal %v:\n got %q\nwant %q", want, b, segs[i].Data)
				}
			}

			// Our client against the recorded server.
			c, s := testenv.TCPPair(t)
			w := &writeLog{Conn: c}
			errc := make(chan error, 1)
			go func() { errc <- replay(s, segs, false) }()
			remote, err := DialPingpong(context.Background(), w, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if remote != tc.server {
				t.Errorf("client learnt %v, want %v", remote, tc.server)
			}
			checkWrites(t, w, segs, true)

			// Our server against the recorded client; connect must run before the answer.
			c, s = testenv.TCPPair(t)
			w = &writeLog{Conn: s}
			go func() { errc <- replay(c, segs, true) }()
			var connected PingpongDest
			remote, err = ServePingpong(context.Background(), w, tc.server, func(r PingpongDest) error {
				if n := len(w.log()); n != 0 {
					return fmt.Errorf("connect called after %d writes", n)
				}
				connected = r
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if remote != tc.client || connected != tc.client {
				t.Errorf("server learnt %v (connect got %v), want %v", remote, connected, tc.client)
			}
			checkWrites(t, w, segs, false)
		})
	}
}

// perftestCase replays one perftest capture with xdproce on either side.
func TestPerftestGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		test PerftestTest
	}{
		{"write_bw.pcap", WriteBW},
		{"read_bw.pcap", ReadBW},
		{"send_bw.pcap", SendBW},
		{"atomic_bw_faa.pcap", AtomicBW},
		{"send_lat_lo.pcap", SendLat}, // ib_send_lat both ends in one guest, captured on lo
	} {
		t.Run(tc.test.String(), func(t *testing.T) {
			segs := capturedExchange(t, tc.file)
			keys, reports, nrep := capturedKeys(t, segs)
			for side := range 2 {
				if tc.test.Plan().Reports != (nrep[side] == 5) {
					t.Fatalf("side %d: %d report fields in the capture, plan says reports=%v", side, nrep[side], tc.test.Plan().Reports)
				}
			}
			if tc.test == WriteBW {
				// write_bw.txt: client QPN 0x15 PSN 0x150e86 RKey 0x61c VAddr 0x562ccecf9000, 5 iterations of 4096 B at 3.07 MB/s.
				want := PerftestDest{OutReads: 1, QPN: 0x15, PSN: 0x150e86, RKey: 0x61c, VAddr: 0x562ccecf9000, GID: GIDFromAddr(mustAddr(t, "192.0.2.12"))}
				if keys[0] != want {
					t.Errorf("client keys %+v, want %+v", keys[0], want)
				}
				if r := reports[0]; r.Size != 4096 || r.Iters != 5 || math.Abs(r.BWAvg-3.07) > 0.005 || math.Abs(r.BWPeak-3.83) > 0.005 {
					t.Errorf("client report %+v, want 4096 B, 5 iterations, peak 3.83, average 3.07", r)
				}
			}
			for _, client := range []bool{true, false} {
				role := map[bool]string{true: "client", false: "server"}[client]
				t.Run(role, func(t *testing.T) {
					me := 1
					if client {
						me = 0
					}
					c, s := testenv.TCPPair(t)
					mine, peer := s, c
					if client {
						mine, peer = c, s
					}
					w := &writeLog{Conn: mine}
					errc := make(chan error, 1)
					go func() { errc <- replay(peer, segs, !client) }()
					pc := NewPerftestConn(w, client)
					var steps []string
					remote, mtu, err := pc.Setup(context.Background(), tc.test, PerftestSetup{
						MTU: 3, Local: keys[me],
						Connect: func(r PerftestDest, mtu int) error { steps = append(steps, "connect"); return nil },
						Ready:   func() error { steps = append(steps, "ready"); return nil },
					})
					if err != nil {
						t.Fatal(err)
					}
					if remote != keys[1-me] || mtu != 3 || pc.RemoteVersion() != "6.06" {
						t.Errorf("setup: remote %+v mtu %d version %q; want %+v, 3, 6.06", remote, mtu, pc.RemoteVersion(), keys[1-me])
					}
					if fmt.Sprint(steps) != "[connect ready]" {
						t.Errorf("callbacks %v, want [connect ready]", steps)
					}
					rem, err := pc.Finish(context.Background(), tc.test, keys[me], reports[me])
					if err != nil {
						t.Fatal(err)
					}
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
					if !sameReport(rem, reports[1-me]) {
						t.Errorf("peer report %+v, want %+v", rem, reports[1-me])
					}
					checkWrites(t, w, segs, client)
				})
			}
		})
	}
}

// capturedKeys gives each side's keys as the tool sent them (its first key message) and its
// bandwidth report, [client, server], with the number of report fields each sent.
func capturedKeys(t *testing.T, segs []segment) (keys [2]PerftestDest, reports [2]PerftestReport, fields [2]int) {
	t.Helper()
	var rep [2][]uint64
	for _, s := range segs {
		side := 1
		if s.FromClient {
			side = 0
		}
		switch len(s.Data) {
		case PerftestKeyLen:
			if keys[side].QPN == 0 {
				d, err := UnmarshalPerftestDest(s.Data)
				if err != nil {
					t.Fatal(err)
				}
				keys[side] = d
			}
		case 8:
			rep[side] = append(rep[side], binary.BigEndian.Uint64(s.Data))
		}
	}
	for side, r := range rep {
		fields[side] = len(r)
		if len(r) == 5 {
			reports[side] = PerftestReport{Size: r[0], Iters: r[1], BWPeak: math.Float64frombits(r[2]), BWAvg: math.Float64frombits(r[3]), MsgRate: math.Float64frombits(r[4])}
		}
	}
	return keys, reports, fields
}

// sameReport compares reports bit for bit (a server's unfilled report may hold NaN patterns).
func sameReport(a, b PerftestReport) bool {
	return a.Size == b.Size && a.Iters == b.Iters && math.Float64bits(a.BWPeak) == math.Float64bits(b.BWPeak) &&
		math.Float64bits(a.BWAvg) == math.Float64bits(b.BWAvg) && math.Float64bits(a.MsgRate) == math.Float64bits(b.MsgRate)
}
