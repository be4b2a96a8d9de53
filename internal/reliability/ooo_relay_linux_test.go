package reliability

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce/wire"
)

// oooRelay is the relay of issue 15's OOO test: 30 % reorder, 2 % loss,
// 1 % duplicates each way.
func oooRelay(seed uint64) netlab.RelayConfig {
	return netlab.RelayConfig{Seed: seed, Reorder: 0.3, Loss: 0.02, Duplicate: 0.01}
}

// sendResult is what `send --json` prints, with the OOO object.
type sendResult struct {
	Size    int64   `json:"size"`
	Seconds float64 `json:"seconds"`
	SHA256  string  `json:"sha256"`
	Op      string  `json:"op"`
	// Reliability is the RC queue pair's loss recovery ("sr", "gbn").
	Reliability string `json:"reliability"`
	CC          string `json:"cc"` // its congestion control ("dcqcn", "none")
	OOO         *struct {
		Paths            int     `json:"paths"`
		Attempts         uint64  `json:"attempts"`
		Delivered        uint64  `json:"delivered"`
		Retries          uint64  `json:"retries"`
		StaleCompletions uint64  `json:"stale_completions"`
		LossEstimate     float64 `json:"loss_estimate"`
		OpPackets        int     `json:"op_packets"`
		Late             uint64  `json:"late_completions"`
		RTTMicros        int64   `json:"rtt_us"`
		RTTDevMicros     int64   `json:"rtt_dev_us"`
		StaleCtx         uint64  `json:"stale_ctx"`
		StaleTID         uint64  `json:"stale_tid"` // late completions the transport dropped
		DupIndex         uint64  `json:"dup_index"`
		Commit           bool    `json:"commit"`
		CommitsPosted    uint64  `json:"commits_posted"`
		CommitFlushes    uint64  `json:"commit_flushes"`
	} `json:"ooo"`
}

// relaySend runs serve in topo's B and `send ARGS` of src from A, checks
// the stored file against want and returns send's result.
func relaySend(t *testing.T, bin string, topo *netlab.Topo, src string, size int64, want []byte, args ...string) sendResult {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	serve, serr := startServe(ctx, t, bin, topo, dir)
	defer func() { _ = serve.Process.Kill(); _ = serve.Wait() }()
	full := append([]string{"send", "--dev", topo.A.Name, "--link", "xsk", "--name", "got.bin", "--json"}, args...)
	send := topo.A.NS.Command(ctx, bin, append(full, topo.B.IPv4.String(), src)...)
	var sout, sstderr bytes.Buffer
	send.Stdout, send.Stderr = &sout, &sstderr
	if err := send.Run(); err != nil {
		t.Fatalf("send %v: %v\n%s%s\nserve: %s", args, err, sout.String(), sstderr.String(), serr.String())
	}
	var res sendResult
	if err := json.Unmarshal(sout.Bytes(), &res); err != nil {
		t.Fatalf("send --json printed %q: %v", sout.String(), err)
	}
	g, err := os.Open(filepath.Join(dir, "got.bin"))
	if err != nil {
		t.Fatalf("received file: %v (serve: %s)", err, serr.String())
	}
	gh := sha256.New()
	n, _ := io.Copy(gh, g)
	g.Close()
	if n != size || !bytes.Equal(gh.Sum(nil), want) {
		t.Fatalf("received %d bytes with SHA-256 %x, want %d bytes with %x", n, gh.Sum(nil), size, want)
	}
	return res
}

// randomFile writes size random bytes to dir/src and returns its path and
// SHA-256.
func randomFile(t *testing.T, dir string, size int64) (string, []byte) {
	t.Helper()
	src := filepath.Join(dir, "src.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return src, h.Sum(nil)
}

// TestPrivilegedOOORelay: `send --mode ooo --paths 4` of 64 MiB (256 MiB
// with -long) through the relay with 30 % reorder, 2 % loss and 1 %
// duplicates each way over AF_XDP arrives byte-exact; the sender's capture
// shows that the transport sent no (context, tid, index) twice and that
// every attempt (first tries and the helper's reissues) went out under a
// tid of its own; the helper's retries are counted (and its stale
// completions reported).
func TestPrivilegedOOORelay(t *testing.T) {
	netlab.Privileged(t)
	size := int64(64 << 20)
	if *long {
		size = 256 << 20
	}
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src, want := randomFile(t, tmp, size)
	topo := netlab.Relayed(t, netlab.LinkConfig{}, oooRelay(15))
	pcap := filepath.Join(tmp, "send.pcapng")
	res := relaySend(t, bin, topo, src, size, want, "--mode", "ooo", "--paths", "4", "--capture", pcap)
	if res.OOO == nil || res.Op != "OOO WRITE" || res.OOO.Paths != 4 {
		t.Fatalf("send result %+v", res)
	}
	o := res.OOO
	t.Logf("%d MiB in %.3f s (%.1f MB/s): %+v; relay %+v", size>>20, res.Seconds, float64(size)/res.Seconds/1e6, *o, topo.Relay.Stats())
	if o.Retries == 0 || o.Attempts != o.Delivered+o.Retries {
		t.Errorf("at 2 %% loss: %d attempts, %d delivered, %d retries", o.Attempts, o.Delivered, o.Retries)
	}

	type key struct {
		ctx   wire.Ctx
		tid   uint32
		index uint32
	}
	type op struct {
		ctx wire.Ctx
		tid uint32
	}
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[key]bool)
	ops := make(map[op]bool)
	cpls := make(map[op]bool)    // completions received, by (initiator context, tid)
	commits := make(map[op]bool) // the commit's attempts sent (not the helper's operations)
	var fr capture.Frame
	var p wire.Packet
	var frames, twice, cplFrames int
	for {
		if err := r.Next(&fr); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if p.DecodeWith(fr.Data, wire.AcceptOOO) != nil {
			continue
		}
		if fr.Dir == capture.DirInbound && p.BTH.Opcode == wire.OOOCompletion {
			cplFrames++
			cpls[op{p.XRH.Ctx, p.XRH.TID}] = true
			continue
		}
		if fr.Dir != capture.DirOutbound || p.BTH.Opcode != wire.OOOWrite {
			continue
		}
		if bytes.HasPrefix(p.Payload, []byte("XDCM")) { // the conditional commit's record (internal/xfer/ooo_commit.go)
			commits[op{p.XRH.Ctx, p.XRH.TID}] = true
			continue
		}
		frames++
		k := key{p.XRH.Ctx, p.XRH.TID, p.BTH.PSN}
		if seen[k] {
			if twice++; twice <= 5 {
				t.Errorf("frame %d: context %v tid %d index %d sent twice", fr.Index, k.ctx, k.tid, k.index)
			}
		}
		seen[k] = true
		ops[op{p.XRH.Ctx, p.XRH.TID}] = true
	}
	t.Logf("capture: %d OOO_WRITE frames sent, %d operations (context, tid); %d completion frames received for %d operations",
		frames, len(ops), cplFrames, len(cpls))
	// The helper's stale completions are counted: every completion it took
	// (delivered, or stale and ignored) is a completion in the capture, and
	// the other completions received were dropped by the transport and
	// counted there (stale_tid, stale_ctx) or are duplicates (dup_index), or
	// came after the counters were read (at most the attempts then in
	// flight: one per context).
	if got := uint64(len(cpls)); got < o.Delivered+o.StaleCompletions {
		t.Errorf("%d operations completed in the capture, fewer than the helper's %d delivered + %d stale",
			got, o.Delivered, o.StaleCompletions)
	}
	if extra, counted := uint64(cplFrames)-o.Delivered-o.StaleCompletions, o.StaleTID+o.StaleCtx+o.DupIndex; extra > counted+128 {
		t.Errorf("%d completion frames beyond the helper's, only %d counted by the transport (stale_tid %d, stale_ctx %d, dup_index %d)",
			extra, counted, o.StaleTID, o.StaleCtx, o.DupIndex)
	}
	// The put ends with the conditional commit: sent at least once, at
	// most once per commit posted and not flushed.
	if n := uint64(len(commits)); !o.Commit || n == 0 || n > o.CommitsPosted-o.CommitFlushes {
		t.Errorf("commit %v: %d sent, %d posted, %d flushed", o.Commit, n, o.CommitsPosted, o.CommitFlushes)
	}
	if twice > 0 || uint64(len(ops)) != o.Attempts || frames < int(size/4096) {
		t.Errorf("%d (context, tid, index) sent more than once; %d (context, tid) in the capture for %d attempts; %d frames",
			twice, len(ops), o.Attempts, frames)
	}
}

// TestPrivilegedOOOvsRC measures (asserts nothing about speed) `send` in
// OOO mode against RC through the relay: clean, 1 % and 5 % loss, 30 %
// reorder. With -long only: it moves 8 × 64 MiB.
func TestPrivilegedOOOvsRC(t *testing.T) {
	netlab.Privileged(t)
	if !*long {
		t.Skip("a measurement: run with -long")
	}
	const size = 64 << 20
	tmp := t.TempDir()
	bin := buildCLI(t, tmp)
	src, want := randomFile(t, tmp, size)
	for i, c := range []struct {
		name string
		rc   netlab.RelayConfig
	}{
		{"clean", netlab.RelayConfig{}},
		{"1% loss", netlab.RelayConfig{Loss: 0.01}},
		{"5% loss", netlab.RelayConfig{Loss: 0.05}},
		{"30% reorder", netlab.RelayConfig{Reorder: 0.3}},
	} {
		c.rc.Seed = uint64(i + 1)
		topo := netlab.Relayed(t, netlab.LinkConfig{}, c.rc)
		var line string
		for _, mode := range []string{"rc", "ooo"} {
			before := topo.Relay.Stats()
			res := relaySend(t, bin, topo, src, size, want, "--mode", mode)
			after := topo.Relay.Stats()
			line += fmt.Sprintf("  %s %.1f MB/s (relay: %d frames, %d lost, %d overflowed)", mode, float64(size)/res.Seconds/1e6,
				after.Received-before.Received, after.Lost-before.Lost, after.Overflow-before.Overflow)
			if o := res.OOO; o != nil {
				line += fmt.Sprintf(" [%d retries, %d late completions seen, %d dropped stale_tid; loss estimate %.2f %%, operations of %d packets; rtt %d ± %d µs]",
					o.Retries, o.Late, o.StaleTID, 100*o.LossEstimate, o.OpPackets, o.RTTMicros, o.RTTDevMicros)
			}
		}
		t.Logf("%s:%s", c.name, line)
	}
}
