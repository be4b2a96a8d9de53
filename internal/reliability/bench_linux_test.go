package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
)

// benchJSON is the part of `bench --json`'s line this test reads.
type benchJSON struct {
	Test        string  `json:"test"`
	Role        string  `json:"role"`
	Iters       int     `json:"iterations"`
	BW          float64 `json:"bw_avg_gbps"`
	Reliability string  `json:"reliability"`
	CC          string  `json:"cc"`
}

// relayBench runs `bench TEST` as the server in topo's B and the client in
// A with args, the client capturing to pcap, and returns both results.
func relayBench(t *testing.T, bin, test string, topo *netlab.Topo, pcap string, srvArgs, cliArgs []string) (srv, cli benchJSON) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scmd := topo.B.NS.Command(ctx, bin, append([]string{"bench", test, "--dev", topo.B.Name, "--link", "xsk", "--json"}, srvArgs...)...)
	var sout, serr bytes.Buffer
	scmd.Stdout, scmd.Stderr = &sout, &serr
	if err := scmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = scmd.Process.Kill(); _ = scmd.Wait() }()
	full := append([]string{"bench", test, "--dev", topo.A.Name, "--link", "xsk", "--json", "--capture", pcap}, cliArgs...)
	ccmd := topo.A.NS.Command(ctx, bin, append(full, topo.B.IPv4.String())...)
	var cout, cerr bytes.Buffer
	ccmd.Stdout, ccmd.Stderr = &cout, &cerr
	if err := ccmd.Run(); err != nil {
		t.Fatalf("bench client %v: %v\n%s%s\nserver: %s%s", cliArgs, err, cout.String(), cerr.String(), sout.String(), serr.String())
	}
	if err := scmd.Wait(); err != nil {
		t.Fatalf("bench server %v: %v\n%s%s", srvArgs, err, sout.String(), serr.String())
	}
	for _, x := range []struct {
		out *bytes.Buffer
		res *benchJSON
	}{{&sout, &srv}, {&cout, &cli}} {
		if err := json.Unmarshal(bytes.TrimSpace(x.out.Bytes()), x.res); err != nil {
			t.Fatalf("bench --json printed %q: %v", x.out.String(), err)
		}
	}
	return srv, cli
}

// TestPrivilegedRelayBench (issue 20): `xdproce bench write` between two
// xdproce ends through the relay at 5 % loss and 2 % reorder over AF_XDP,
// 256 × 64 KiB. By default both ends agree on selective repeat and DCQCN:
// both say so, the client's capture shows SR_SACKs coming back and every
// data frame ECT(0). With --reliability gbn --cc none on the server only,
// both ends run go-back-N without congestion control: no frame of the
// manufacturer-specific range, no ECT(0), as between rxe peers. Then
// `bench read` the same way: with selective repeat some READ requests ask
// for a range short of their READ's end (roce/qp sr_read.go), with
// go-back-N none does.
func TestPrivilegedRelayBench(t *testing.T) {
	netlab.Privileged(t)
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	for _, tc := range []struct {
		name    string
		srvArgs []string
		rel, cc string
	}{
		{"sr-dcqcn", nil, "sr", "dcqcn"},
		{"gbn-none", []string{"--reliability", "gbn", "--cc", "none"}, "gbn", "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Seed: 7, Loss: 0.05, Reorder: 0.02})
			pcap := filepath.Join(t.TempDir(), "client.pcapng")
			srv, cli := relayBench(t, bin, "write", topo, pcap, tc.srvArgs, []string{"--size", "65536", "--iters", "256"})
			for who, r := range map[string]benchJSON{"server": srv, "client": cli} {
				if r.Reliability != tc.rel || r.CC != tc.cc || r.Iters != 256 || r.BW <= 0 {
					t.Errorf("%s: %+v; want reliability %q, cc %q, 256 iterations, a bandwidth", who, r, tc.rel, tc.cc)
				}
			}
			c := countCapture(t, pcap)
			vendor, sacks, data, ect := c.vendor, c.sacks, c.data, c.ect
			t.Logf("%.2f Gb/s; relay %+v; client capture: %d data frames (%d ECT(0)), %d SR_SACKs in, %d vendor-range frames",
				cli.BW, topo.Relay.Stats(), data, ect, sacks, vendor)
			if data < 256*64*1024/4096 {
				t.Fatalf("%d data frames in the client's capture, want at least %d", data, 256*64*1024/4096)
			}
			if strings.HasPrefix(tc.name, "sr") && (sacks == 0 || ect != data) {
				t.Errorf("sr/dcqcn: %d SR_SACKs, %d of %d data frames ECT(0); want some and all", sacks, ect, data)
			}
			if tc.rel == "gbn" && (vendor != 0 || ect != 0) {
				t.Errorf("gbn/none: %d vendor-range frames, %d ECT(0) frames; want none", vendor, ect)
			}
		})
	}
	for _, rel := range []string{"sr", "gbn"} {
		t.Run("read-"+rel, func(t *testing.T) {
			topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Seed: 7, Loss: 0.05, Reorder: 0.02})
			pcap := filepath.Join(t.TempDir(), "client.pcapng")
			srv, cli := relayBench(t, bin, "read", topo, pcap, []string{"--reliability", rel}, []string{"--size", "65536", "--iters", "256"})
			if srv.Reliability != rel || cli.Reliability != rel || cli.Iters != 256 {
				t.Fatalf("server %+v, client %+v; want reliability %q, 256 iterations", srv, cli, rel)
			}
			reqs, short := readRequests(t, pcap, 65536)
			t.Logf("%.2f Gb/s; relay %+v; %d READ requests sent, %d for a range short of their READ's end", cli.BW, topo.Relay.Stats(), reqs, short)
			if reqs < 256 || rel == "sr" && short == 0 || rel == "gbn" && short != 0 {
				t.Errorf("%s: %d READ requests, %d short of their READ's end; want at least 256, and some short only with sr", rel, reqs, short)
			}
		})
	}
}
