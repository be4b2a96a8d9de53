package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/roce"
)

// capturedOut describes the frames a capture file holds that this side sent.
func capturedOut(t *testing.T, path string) []*capture.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []*capture.Record
	for {
		var fr capture.Frame
		if err := rd.Next(&fr); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if r := capture.Describe(&fr); r.RoCE && r.Dir == "out" {
			if r.Error != "" {
				t.Errorf("frame %d: %s", r.Index, r.Error)
			}
			out = append(out, r)
		}
	}
}

// benchRow is the one JSON row of a bench side.
func benchRow(t *testing.T, who string, r pairRun) benchResult {
	t.Helper()
	var x benchResult
	if err := json.Unmarshal([]byte(r.stdout), &x); err != nil {
		t.Fatalf("%s output %q: %v\nstderr: %s", who, r.stdout, err, r.stderr)
	}
	return x
}

// TestPrivilegedBenchOOO: 'bench write --mode ooo' between two processes
// over AF_XDP: both rows give the size, the iterations and a bandwidth,
// the run checked that the server's buffer holds the client's bytes (its
// SHA-256) and that the server sent a completion per WRITE, and the
// client's capture shows OOO_WRITEs only, spread over --paths 4 UDP source
// ports, with every packet of every WRITE. A server not given --mode takes
// the client's. An RC run's capture has no vendor opcode (≥ 0xC0).
func TestPrivilegedBenchOOO(t *testing.T) {
	testenv.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	dir := t.TempDir()
	const size, iters = 65536, 200
	t.Run("ooo", func(t *testing.T) {
		capPath := filepath.Join(dir, "ooo.pcapng")
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "write", "--link", "xsk", "--json"},
			[]string{"bench", "write", "--link", "xsk", "--json", "--mode", "ooo", "--paths", "4", "--size", "65536", "--iters", "200", "--capture", capPath})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		t.Logf("client: %s%s", c.stdout, c.stderr)
		if !strings.Contains(s.stderr, "agreed with the xdproce peer on --mode ooo, --paths 4") {
			t.Errorf("the server does not name the mode it took: %q", s.stderr)
		}
		for who, r := range map[string]pairRun{"server": s, "client": c} {
			x := benchRow(t, who, r)
			if x.Mode != "ooo" || x.Paths != 4 || x.Bytes != size || x.Iters != iters || x.QPs != 1 || x.BW <= 0 || x.Rate <= 0 || x.Seconds <= 0 {
				t.Errorf("%s row %+v", who, x)
			}
			if want := x.Bytes * x.Iters * 8; x.BW*x.Seconds*1e9 < float64(want)*0.99 || x.BW*x.Seconds*1e9 > float64(want)*1.01 {
				t.Errorf("%s: %.3f Gb/s × %.3f s is not %d bits", who, x.BW, x.Seconds, want)
			}
		}
		x := benchRow(t, "client", c)
		ports := map[string]bool{}
		writes, bytes := 0, 0
		for _, r := range capturedOut(t, capPath) {
			if r.BTH == nil || r.BTH.Opcode != "OOO_WRITE" {
				t.Fatalf("frame %d: the client sent %v", r.Index, r.BTH)
			}
			_, port, _ := strings.Cut(r.Src[strings.LastIndexByte(r.Src, ']')+1:], ":")
			ports[port] = true
			writes++
			bytes += r.PayloadLen
		}
		seg := x.PathMTU
		perWrite := (size + seg - 1) / seg
		if writes < iters*perWrite || writes > (iters+x.Retries)*perWrite || bytes != writes/perWrite*size {
			t.Errorf("the client sent %d OOO_WRITEs with %d bytes; want %d per WRITE, %d WRITEs (+%d reissued)", writes, bytes, perWrite, iters, x.Retries)
		}
		if len(ports) != 4 {
			t.Errorf("source ports %v, want 4", ports)
		}
	})
	// --link udp sends from port 4791 only: the client says so and both
	// rows give one path.
	t.Run("udp-one-path", func(t *testing.T) {
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "write", "--json", "--mode", "ooo"},
			[]string{"bench", "write", "--json", "--mode", "ooo", "--paths", "4", "--size", "4096", "--iters", "50"})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		if !strings.Contains(c.stderr, "--paths 4: UDP sends every frame from UDP port 4791: one path") {
			t.Errorf("the client does not say it uses one path: %q", c.stderr)
		}
		for who, r := range map[string]pairRun{"server": s, "client": c} {
			if x := benchRow(t, who, r); x.Mode != "ooo" || x.Paths != 1 || x.Bytes != 4096 || x.Iters != 50 || x.BW <= 0 {
				t.Errorf("%s row %+v", who, x)
			}
		}
	})
	t.Run("rc-no-vendor-opcodes", func(t *testing.T) {
		capPath := filepath.Join(dir, "rc.pcapng")
		s, c := runAgreePair(t, topo, 60*time.Second, []string{"bench", "write", "--link", "xsk", "--json"},
			[]string{"bench", "write", "--link", "xsk", "--json", "--size", "65536", "--iters", "50", "--capture", capPath})
		if s.code != 0 || c.code != 0 {
			t.Fatalf("server exit %d: %s\nclient exit %d: %s", s.code, s.stderr, c.code, c.stderr)
		}
		if x := benchRow(t, "client", c); x.Mode != "" || x.Retries != 0 {
			t.Errorf("an RC run's row %+v", x)
		}
		recs := capturedOut(t, capPath)
		writes := 0
		for _, r := range recs {
			if r.BTH.OpcodeNum >= 0xC0 {
				t.Fatalf("frame %d: %s in an RC run", r.Index, r.BTH.Opcode)
			}
			if strings.Contains(r.BTH.Opcode, "RDMA_WRITE") {
				writes++
			}
		}
		if writes == 0 {
			t.Errorf("the capture has %d frames and no RDMA WRITE", len(recs))
		}
	})
}

// TestBenchOOOStockPeer: a bench --mode ooo client whose server is a stock
// perftest peer (its PSN is no tag) stops with one line naming the reason,
// and its device sent no frame at all, so nothing OOO; so does a --mode ooo
// server whose client is a stock peer.
func TestBenchOOOStockPeer(t *testing.T) {
	const want = "--mode ooo needs an xdproce peer: the peer is not xdproce (perftest?)"
	for _, client := range []bool{true, false} {
		dev, stock := stockPair(t, 1<<16)
		b := &bench{env: &Env{Stdout: io.Discard, Stderr: io.Discard}, dev: dev, test: cm.WriteBW, name: "write", size: 4096, iters: 10, qps: 1,
			mode: cm.ModeOOO, paths: 4, set: []string{"mode", "paths"}, sgid: netip.MustParseAddr("198.51.100.1"), mtu: roce.MTU1024, budgetBase: 5 * time.Second}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if client {
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				stock.Perftest(ctx, conn, false, cm.WriteBW, 4096, 10, 3, "")
			}()
			_, err = b.client(ctx, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port, time.Second)
			ln.Close()
		} else {
			errc := make(chan error, 1)
			go func() { _, err := b.serve(ctx, ln); errc <- err }()
			conn, derr := net.Dial("tcp", ln.Addr().String())
			if derr != nil {
				t.Fatal(derr)
			}
			go stock.Perftest(ctx, conn, true, cm.WriteBW, 4096, 10, 3, "")
			err = <-errc
			conn.Close()
		}
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("client %v: %v, want one line %q", client, err, want)
		}
		if st := dev.Stats(); st.TxFrames != 0 {
			t.Errorf("client %v: the device sent %d frames", client, st.TxFrames)
		}
	}
}
