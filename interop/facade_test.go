package interop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// These tests drive xdproce's roce facade and package cm directly (no CLI) against the tools
// in the guest: the same runs as the CLI matrix, available as soon as the engine is. Their rows
// say "roce+cm" in the operation.

const (
	wrRecv = 1
	wrSend = 2
)

// side is xdproce's end of one run: a device on the tap (or link/udp on its address), one RC
// queue pair and one registered buffer, capturing every frame to a pcapng file.
type side struct {
	t       *testing.T
	dev     *roce.Device
	pd      *roce.PD
	cq      *roce.CQ
	q       *roce.QP
	m       *roce.MR
	buf     []byte
	psn     uint32
	gid     cm.GID
	capture string
	closed  bool
	wcs     []roce.WC
}

func newSide(t *testing.T, g *guest, link roce.LinkKind) *side {
	t.Helper()
	s := &side{t: t, capture: filepath.Join(t.TempDir(), "xdproce.pcapng"), wcs: make([]roce.WC, 64)}
	f, err := os.Create(s.capture)
	if err != nil {
		t.Fatal(err)
	}
	err = g.inNetns(func() error {
		var err error
		s.dev, err = roce.Open(g.tap, &roce.Options{Link: link, Capture: f})
		return err
	})
	if err != nil {
		f.Close()
		t.Fatalf("roce.Open(%s, %v) in %s: %v", g.tap, link, g.netns, err)
	}
	t.Cleanup(func() { s.close(); f.Close() })
	t.Logf("device %s: link %s (%s), path MTU %v", g.tap, s.dev.LinkName(), s.dev.LinkReason(), s.dev.PathMTU())
	s.pd = s.dev.AllocPD()
	if s.cq, err = s.dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if s.q, err = s.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 256, MaxRecvWR: 256}); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 256<<10)
	if s.m, err = s.pd.RegMR(s.buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	s.psn = rand.Uint32() & 0xffffff
	a, err := s.dev.GID(1)
	if err != nil {
		t.Fatal(err)
	}
	s.gid = cm.GID(a.As16())
	if want := cm.GIDFromAddr(netip.MustParseAddr(g.hostIP)); s.gid != want {
		t.Fatalf("GID 1 of the device is %v, want %v (rxe's order: index 1 = the first IPv4 address)", s.gid, want)
	}
	return s
}

func (s *side) close() {
	if !s.closed {
		s.closed = true
		s.dev.Close()
	}
}

func (s *side) connect(qpn, psn uint32, gid cm.GID) error {
	return s.q.Connect(s.psn, roce.Endpoint{QPN: qpn, PSN: psn, GID: netip.AddrFrom16(gid)}, nil)
}

func (s *side) sge(off, n int) []roce.SGE {
	return []roce.SGE{{Addr: s.m.Addr() + uint64(off), Length: uint32(n), LKey: s.m.LKey()}}
}

func (s *side) postRecvs(n, size int) error {
	for range n {
		if err := s.q.PostRecv(roce.RecvWR{ID: wrRecv, SGL: s.sge(0, size)}); err != nil {
			return err
		}
	}
	return nil
}

// poll waits for at least one completion and returns them; any error status is an error.
func (s *side) poll(ctx context.Context) ([]roce.WC, error) {
	n, err := s.cq.Wait(ctx, s.wcs)
	if err != nil {
		return nil, fmt.Errorf("cq wait: %w", err)
	}
	for _, wc := range s.wcs[:n] {
		if wc.Status != qp.WCSuccess {
			return nil, fmt.Errorf("work completion %d: %v", wc.ID, wc.Status)
		}
	}
	return s.wcs[:n], nil
}

// pingpong is ibv_rc_pingpong's loop: the client sends first; each side sends its next
// message once its last send and a receive completed; iters each way.
func (s *side) pingpong(ctx context.Context, size, iters int, client bool) error {
	send := func() error {
		return s.q.PostSend(roce.SendWR{ID: wrSend, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: s.sge(size, size)})
	}
	const pRecv, pSend = 1, 2
	pending := pRecv
	scnt, rcnt := 0, 0
	if client {
		if err := send(); err != nil {
			return err
		}
		pending |= pSend
	}
	for scnt < iters || rcnt < iters {
		wcs, err := s.poll(ctx)
		if err != nil {
			return fmt.Errorf("after %d sends, %d receives: %w", scnt, rcnt, err)
		}
		for _, wc := range wcs {
			switch wc.ID {
			case wrSend:
				scnt++
				pending &^= pSend
			case wrRecv:
				if int(wc.ByteLen) != size {
					return fmt.Errorf("received %d bytes, want %d", wc.ByteLen, size)
				}
				rcnt++
				pending &^= pRecv
			}
			if scnt < iters && pending == 0 {
				if err := send(); err != nil {
					return err
				}
				pending = pRecv | pSend
			}
		}
	}
	return nil
}

// finish closes the device (flushing the capture), verifies the capture with
// `xdproce dump --verify` when the binary has it, and returns the matrix note.
func (s *side) finish(t *testing.T) string {
	st := s.dev.Stats()
	s.close()
	note := fmt.Sprintf("%s, retransmissions %d", s.dev.LinkName(), st.Retransmits)
	if st.ICRCIDRepaired > 0 {
		note += fmt.Sprintf(", %d received ICRCs matched only with another IPv4 ID", st.ICRCIDRepaired)
	}
	if st.DropBadICRC > 0 {
		t.Errorf("xdproce dropped %d received frames for a bad ICRC", st.DropBadICRC)
	}
	bin := xdproceBin(t)
	if exec.Command(bin, "dump", "-h").Run() != nil {
		return note + ", capture not verified (no xdproce dump)"
	}
	out, err := exec.Command(bin, "dump", "--verify", s.capture).CombinedOutput()
	if err != nil {
		t.Errorf("xdproce dump --verify %s: %v\n%s", s.capture, err, lastLines(string(out), 20))
		in, outb := 0, 0
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "icrc BAD") {
				if strings.Contains(l, " in ") {
					in++
				} else {
					outb++
				}
			}
		}
		return note + fmt.Sprintf(", capture FAILED dump --verify (bad ICRC: %d received, %d sent frames)", in, outb)
	}
	return note + ", capture verified"
}

func linkKind(name string) roce.LinkKind {
	if name == "udp" {
		return roce.LinkUDP
	}
	return roce.LinkXSK
}

// TestPrivilegedInteropFacadePingpong: ibv_rc_pingpong against roce+cm, 64 B and 3000 B,
// 20 iterations, both roles, over AF_XDP and link/udp.
func TestPrivilegedInteropFacadePingpong(t *testing.T) {
	g := needGuest(t)
	const iters = 20
	for _, link := range []string{"xsk", "udp"} {
		for _, size := range []int{64, 3000} {
			for _, srv := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%dB/xdproce-%s", link, size, role(srv)), func(t *testing.T) {
					note := ""
					record(t, "ibv_rc_pingpong", fmt.Sprintf("SEND %d B x%d roce+cm", size, iters), role(srv), link, &note)
					ctx := ctxFor(t, 90*time.Second)
					s := newSide(t, g, linkKind(link))
					tool := fmt.Sprintf("exec stdbuf -oL ibv_rc_pingpong -d rxe0 -g $XI_GID_INDEX -s %d -n %d -m 1024", size, iters)
					local := cm.PingpongDest{QPN: s.q.QPN(), PSN: s.psn, GID: s.gid}
					var j *job
					if srv {
						l, err := g.listenIn(cm.DefaultPort)
						if err != nil {
							t.Fatal(err)
						}
						defer l.Close()
						context.AfterFunc(ctx, func() { l.Close() })
						j = g.start(t, tool+" "+g.hostIP)
						c, err := l.Accept()
						if err != nil {
							t.Fatalf("accept: %v\n%s", err, j.output())
						}
						defer c.Close()
						_, err = cm.ServePingpong(ctx, c, local, func(r cm.PingpongDest) error {
							if err := s.connect(r.QPN, r.PSN, r.GID); err != nil {
								return err
							}
							return s.postRecvs(iters, size)
						})
						if err != nil {
							t.Fatal(err)
						}
					} else {
						j = g.start(t, tool)
						g.guestListening(t, j, cm.DefaultPort, 30*time.Second)
						c, err := g.dialIn(ctx, cm.DefaultPort)
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						r, err := cm.DialPingpong(ctx, c, local)
						if err != nil {
							t.Fatal(err)
						}
						if err := s.connect(r.QPN, r.PSN, r.GID); err != nil {
							t.Fatal(err)
						}
						if err := s.postRecvs(iters, size); err != nil {
							t.Fatal(err)
						}
					}
					perr := s.pingpong(ctx, size, iters, !srv)
					out, rc, err := j.wait(30 * time.Second)
					note = s.finish(t)
					if perr != nil || err != nil || rc != 0 {
						t.Fatalf("xdproce: %v; ibv_rc_pingpong rc %d %v:\n%s", perr, rc, err, out)
					}
					if want := fmt.Sprintf("%d bytes in ", 2*size*iters); !strings.Contains(out, want) {
						t.Errorf("ibv_rc_pingpong output lacks %q:\n%s", want, out)
					}
				})
			}
		}
	}
}

// perftestClient runs test against a perftest server in the guest and returns the report sent.
func (s *side) perftestClient(ctx context.Context, c net.Conn, test cm.PerftestTest, size, iters int, atomic string) error {
	pc := cm.NewPerftestConn(c, true)
	keys := cm.PerftestDest{OutReads: 16, QPN: s.q.QPN(), PSN: s.psn, RKey: s.m.RKey(), VAddr: s.m.Addr(), GID: s.gid}
	var remote cm.PerftestDest
	remote, _, err := pc.Setup(ctx, test, cm.PerftestSetup{MTU: 3, Local: keys,
		Connect: func(r cm.PerftestDest, mtu int) error { return s.connect(r.QPN, r.PSN, r.GID) },
		Ready: func() error {
			if test == cm.SendLat {
				return s.postRecvs(iters, size)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	t0 := time.Now()
	var prev uint64
	if test == cm.SendLat {
		for i := range iters {
			if err := s.q.PostSend(roce.SendWR{ID: wrSend, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: s.sge(size, size)}); err != nil {
				return err
			}
			for got := 0; got < 2; {
				wcs, err := s.poll(ctx)
				if err != nil {
					return fmt.Errorf("iteration %d: %w", i, err)
				}
				got += len(wcs)
			}
		}
	} else {
		posted, done := 0, 0
		for done < iters {
			for posted < iters && posted-done < 64 {
				wr := roce.SendWR{ID: uint64(posted), Flags: qp.Signaled, SGL: s.sge(0, size), RemoteAddr: remote.VAddr, RKey: remote.RKey}
				switch test {
				case cm.WriteBW:
					wr.Opcode = qp.WRRDMAWrite
				case cm.ReadBW:
					wr.Opcode = qp.WRRDMARead
				case cm.SendBW:
					wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRSend, 0, 0
				case cm.AtomicBW:
					wr.SGL = s.sge(8*(posted%1024), 8)
					if atomic == "CMP_AND_SWAP" {
						wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpSwp, 0, uint64(posted)+1
					} else {
						wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAdd, 1
					}
				}
				if err := s.q.PostSend(wr); err != nil {
					return err
				}
				posted++
			}
			wcs, err := s.poll(ctx)
			if err != nil {
				return fmt.Errorf("after %d of %d completions: %w", done, iters, err)
			}
			for _, wc := range wcs {
				if test == cm.AtomicBW && atomic != "CMP_AND_SWAP" {
					// Fetch-and-add returns the value before each add: consecutive values.
					off := 8 * (int(wc.ID) % 1024)
					v := leU64(s.buf[off:])
					if wc.ID > 0 && v != prev+1 {
						return fmt.Errorf("FETCH_AND_ADD %d returned %d after %d", wc.ID, v, prev)
					}
					prev = v
				}
			}
			done += len(wcs)
		}
	}
	el := time.Since(t0).Seconds()
	mb := float64(size) * float64(iters) / el / (1 << 20)
	_, err = pc.Finish(ctx, test, keys, cm.PerftestReport{Size: uint64(size), Iters: uint64(iters), BWPeak: mb, BWAvg: mb, MsgRate: float64(iters) / el / 1e6})
	return err
}

func leU64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// perftestServer serves one run of test to a perftest client in the guest.
func (s *side) perftestServer(ctx context.Context, c net.Conn, test cm.PerftestTest, size, iters int) error {
	pc := cm.NewPerftestConn(c, false)
	keys := cm.PerftestDest{OutReads: 16, QPN: s.q.QPN(), PSN: s.psn, RKey: s.m.RKey(), VAddr: s.m.Addr(), GID: s.gid}
	_, _, err := pc.Setup(ctx, test, cm.PerftestSetup{MTU: 3, Local: keys,
		Connect: func(r cm.PerftestDest, mtu int) error { return s.connect(r.QPN, r.PSN, r.GID) },
		Ready: func() error {
			if test == cm.SendBW || test == cm.SendLat {
				return s.postRecvs(iters, size)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	switch test {
	case cm.SendBW:
		for got := 0; got < iters; {
			wcs, err := s.poll(ctx)
			if err != nil {
				return fmt.Errorf("after %d of %d receives: %w", got, iters, err)
			}
			got += len(wcs)
		}
	case cm.SendLat:
		for i := range iters {
			for got := false; !got; {
				wcs, err := s.poll(ctx)
				if err != nil {
					return fmt.Errorf("iteration %d: %w", i, err)
				}
				for _, wc := range wcs {
					got = got || wc.ID == wrRecv
				}
			}
			if err := s.q.PostSend(roce.SendWR{ID: wrSend, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: s.sge(size, size)}); err != nil {
				return err
			}
		}
	}
	_, err = pc.Finish(ctx, test, keys, cm.PerftestReport{})
	return err
}

// TestPrivilegedInteropFacadePerftest: the perftest tools against roce+cm, both roles, over
// AF_XDP: ib_write_bw, ib_read_bw, ib_send_bw (4096 B x100, 65536 B x20), ib_atomic_bw
// (FETCH_AND_ADD, CMP_AND_SWAP), ib_send_lat.
func TestPrivilegedInteropFacadePerftest(t *testing.T) {
	g := needGuest(t)
	type tc struct {
		test        cm.PerftestTest
		op, atomic  string
		size, iters int
	}
	var cases []tc
	for _, b := range []struct {
		test cm.PerftestTest
		op   string
	}{{cm.WriteBW, "RDMA WRITE"}, {cm.ReadBW, "RDMA READ"}, {cm.SendBW, "SEND"}} {
		for _, s := range []struct{ size, iters int }{{4096, 100}, {65536, 20}} {
			cases = append(cases, tc{test: b.test, op: fmt.Sprintf("%s %d B x%d roce+cm", b.op, s.size, s.iters), size: s.size, iters: s.iters})
		}
	}
	for _, a := range []string{"FETCH_AND_ADD", "CMP_AND_SWAP"} {
		cases = append(cases, tc{test: cm.AtomicBW, op: a + " x100 roce+cm", atomic: a, size: 8, iters: 100})
	}
	cases = append(cases, tc{test: cm.SendLat, op: "SEND 64 B x100 roce+cm", size: 64, iters: 100})
	for _, c := range cases {
		for _, srv := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/%s/xdproce-%s", c.test, strings.ReplaceAll(c.op, " ", "_"), role(srv)), func(t *testing.T) {
				note := ""
				record(t, c.test.String(), c.op, role(srv), "xsk", &note)
				ctx := ctxFor(t, 120*time.Second)
				s := newSide(t, g, roce.LinkXSK)
				tool := fmt.Sprintf("exec stdbuf -oL %v -d rxe0 -x $XI_GID_INDEX -n %d -m 1024", c.test, c.iters)
				if c.test == cm.AtomicBW {
					tool += " -A " + c.atomic
				} else {
					tool += fmt.Sprintf(" -s %d", c.size)
				}
				var j *job
				var rerr error
				if srv {
					l, err := g.listenIn(cm.DefaultPort)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
					context.AfterFunc(ctx, func() { l.Close() })
					j = g.start(t, tool+" "+g.hostIP)
					conn, err := l.Accept()
					if err != nil {
						t.Fatalf("accept: %v\n%s", err, j.output())
					}
					defer conn.Close()
					rerr = s.perftestServer(ctx, conn, c.test, c.size, c.iters)
				} else {
					j = g.start(t, tool)
					g.guestListening(t, j, cm.DefaultPort, 30*time.Second)
					conn, err := g.dialIn(ctx, cm.DefaultPort)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					rerr = s.perftestClient(ctx, conn, c.test, c.size, c.iters, c.atomic)
				}
				out, rc, err := j.wait(30 * time.Second)
				note = s.finish(t)
				if rerr != nil || err != nil || rc != 0 {
					t.Fatalf("xdproce: %v; %v rc %d %v:\n%s", rerr, c.test, rc, err, out)
				}
				if row := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*%d\s+%d\s+[0-9.]+`, c.size, c.iters)); !row.MatchString(out) {
					t.Errorf("%v printed no result row for %d B x%d:\n%s", c.test, c.size, c.iters, out)
				}
			})
		}
	}
}
