package reliability

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce/wire"
)

// capCounts are what a sender's capture shows: the RC requests sent (and
// of them the ECT(0) ones), and the CNPs, SR_SACKs and frames of the
// manufacturer-specific opcode range (0xE0 up, either way).
type capCounts struct{ data, ect, cnps, sacks, vendor int }

// countCapture reads a sender's capture.
func countCapture(t *testing.T, pcap string) capCounts {
	t.Helper()
	var c capCounts
	eachFrame(t, pcap, func(fr *capture.Frame, p *wire.Packet) {
		if p.BTH.Opcode >= 0xE0 {
			c.vendor++
		}
		switch info, _ := p.BTH.Opcode.Info(); {
		case fr.Dir == capture.DirInbound && p.BTH.Opcode == wire.CNP:
			c.cnps++
		case fr.Dir == capture.DirInbound && p.BTH.Opcode == wire.SRSack:
			c.sacks++
		case fr.Dir == capture.DirOutbound && info.Request && info.Transport == wire.RC:
			c.data++
			if p.TOS&3 == 2 {
				c.ect++
			}
		}
	})
	return c
}

// eachFrame calls f with every RoCE frame of a capture, decoded.
func eachFrame(t *testing.T, pcap string, f func(*capture.Frame, *wire.Packet)) {
	t.Helper()
	file, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, err := capture.NewReader(file)
	if err != nil {
		t.Fatal(err)
	}
	var fr capture.Frame
	var p wire.Packet
	for {
		if err := r.Next(&fr); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatal(err)
		}
		if p.DecodeWith(fr.Data, wire.AcceptSR) == nil {
			f(&fr, &p)
		}
	}
}

// readRequests counts the READ requests sent in a requester's capture and
// of them those whose range ends short of a whole size-byte READ (the
// first request's VA taken as the buffer's start).
func readRequests(t *testing.T, pcap string, size uint64) (reqs, short int) {
	t.Helper()
	var base uint64
	eachFrame(t, pcap, func(fr *capture.Frame, p *wire.Packet) {
		if fr.Dir != capture.DirOutbound || p.BTH.Opcode != wire.RCReadRequest {
			return
		}
		if reqs++; reqs == 1 {
			base = p.RETH.VA
		}
		if (p.RETH.VA+uint64(p.RETH.DMALen)-base)%size != 0 {
			short++
		}
	})
	return reqs, short
}

// ccCapture counts, in a sender's capture, the data frames sent (and of
// them the ECN-capable ones) and the CNPs received.
func ccCapture(t *testing.T, pcap string) (data, ect, cnps int) {
	c := countCapture(t, pcap)
	return c.data, c.ect, c.cnps
}

// TestPrivilegedRelayDCQCN: `xdproce send` of 16 MiB through the relay's
// bottleneck (250 Mb/s, 256 frames, ECN marking RED-like from 16 to 128
// frames) over AF_XDP, with --cc dcqcn (the default; both sides agree)
// and --cc none. With DCQCN the data frames are ECT(0), the bottleneck
// marks some, the sender's capture shows CNPs coming back; without it no
// frame is ECN-capable, none is marked, no CNP comes. The file lands whole
// either way.
func TestPrivilegedRelayDCQCN(t *testing.T) {
	netlab.Privileged(t)
	size := int64(16 << 20)
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src, want := randomFile(t, tmp, size)
	bn := netlab.Bottleneck{Rate: 250_000_000, Queue: 256, MarkMin: 16, MarkMax: 128, MarkP: 0.2}
	for _, cc := range []string{"dcqcn", "none"} {
		t.Run(cc, func(t *testing.T) {
			topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{Seed: 7, Bottleneck: bn})
			pcap := filepath.Join(t.TempDir(), "send.pcapng")
			res := relaySend(t, bin, topo, src, size, want, "--cc", cc, "--capture", pcap)
			if res.CC != cc {
				t.Fatalf("send used congestion control %q, want %q", res.CC, cc)
			}
			st := topo.Relay.Stats().Bottleneck
			data, ect, cnps := ccCapture(t, pcap)
			t.Logf("%d MiB in %.3f s (%.0f Mb/s); bottleneck %+v; sent %d data frames, %d ECT(0); %d CNPs back",
				size>>20, res.Seconds, float64(size)*8/res.Seconds/1e6, st, data, ect, cnps)
			if data == 0 {
				t.Fatal("no data frames in the sender's capture")
			}
			if cc == "dcqcn" && (ect != data || st.Marked == 0 || cnps == 0) {
				t.Fatalf("dcqcn: %d of %d data frames ECT(0), %d marked, %d CNPs: want all, some, some", ect, data, st.Marked, cnps)
			}
			if cc == "none" && (ect != 0 || st.ECT != 0 || st.Marked != 0 || cnps != 0) {
				t.Fatalf("none: %d ECT(0) frames sent, %d at the bottleneck, %d marked, %d CNPs: want none", ect, st.ECT, st.Marked, cnps)
			}
		})
	}
}
