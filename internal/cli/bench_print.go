package cli

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/roce"
)

// summarise adds up the queue pairs' results; the server reports the
// client's measurement (peer) as perftest does, except for lat, whose
// latencies only the client has.
func (b *bench) summarise(role string, rs []toolpeer.PerftestResult, peer bool) benchResult {
	r := benchResult{Schema: 1, Test: b.name, Role: role, Bytes: b.size, Iters: b.iters,
		Link: b.dev.LinkName(), PathMTU: b.pathMTU().Bytes()}
	if b.mode != cm.ModeOOO {
		r.Reliability, r.CC = cmp.Or(b.rel, cm.RelGBN), cmp.Or(b.cc, cm.CCNone)
	}
	var lat []time.Duration
	var longest time.Duration
	var peerBW, peerRate float64
	for _, x := range rs {
		r.QPs += 1 + len(x.MoreLocal) // -R -q N: one result for N queue pairs
		longest = max(longest, x.Elapsed)
		lat = append(lat, x.Latencies...)
		// perftest's MB is 2^20 bytes.
		peerBW += x.PeerReport.BWAvg * (1 << 20) * 8 / 1e9
		peerRate += x.PeerReport.MsgRate
	}
	r.Seconds = longest.Seconds()
	if peer && peerRate > 0 {
		r.BW, r.Rate = peerBW, peerRate
	} else if r.Seconds > 0 {
		msgs := float64(b.iters) * float64(r.QPs)
		r.BW = msgs * float64(b.size) * 8 / r.Seconds / 1e9
		r.Rate = msgs / r.Seconds / 1e6
	}
	if b.test == cm.SendLat && len(lat) > 0 {
		slices.Sort(lat)
		pct := func(p float64) float64 {
			i := int(float64(len(lat))*p+0.999999) - 1
			return float64(lat[max(0, min(i, len(lat)-1))]) / 1e3
		}
		r.P50, r.P99 = pct(0.5), pct(0.99)
	}
	return r
}

// printBench prints xdproce's table: one row per run (several with -a).
func printBench(env *Env, rs []benchResult) {
	line := strings.Repeat("-", 92)
	r := rs[0]
	fmt.Fprintln(env.Stdout, line)
	mode := ""
	switch {
	case r.Mode == cm.ModeOOO:
		mode = fmt.Sprintf(", OOO mode over %d path(s), %d reissued", r.Paths, r.Retries)
	case r.Reliability == cm.RelSR || r.CC == cm.CCDCQCN:
		mode = fmt.Sprintf(", loss recovery %s, cc %s", r.Reliability, r.CC)
	}
	fmt.Fprintf(env.Stdout, "  xdproce bench %s (%s), %d queue pair(s), %s, path MTU %d%s\n", r.Test, r.Role, r.QPs, r.Link, r.PathMTU, mode)
	fmt.Fprintln(env.Stdout, line)
	fmt.Fprintf(env.Stdout, " %-10s %-13s %-20s %-15s %-15s %-15s\n", "#bytes", "#iterations", "BW average[Gb/sec]", "MsgRate[Mpps]", "p50[usec]", "p99[usec]")
	for _, r := range rs {
		p50, p99 := "-", "-"
		if r.P50 > 0 || r.P99 > 0 {
			p50, p99 = strconv.FormatFloat(r.P50, 'f', 2, 64), strconv.FormatFloat(r.P99, 'f', 2, 64)
		}
		fmt.Fprintf(env.Stdout, " %-10d %-13d %-20.2f %-15.6f %-15s %-15s\n", r.Bytes, r.Iters, r.BW, r.Rate, p50, p99)
	}
	fmt.Fprintln(env.Stdout, line)
}

// perftestTitles are the titles perftest prints above its parameters.
var perftestTitles = map[cm.PerftestTest]string{
	cm.WriteBW: "RDMA_Write BW Test", cm.ReadBW: "RDMA_Read BW Test", cm.SendBW: "Send BW Test", cm.SendLat: "Send Latency Test",
}

// printPerftest prints the run as the perftest tool of the test does: title
// and parameters, both addresses, the result table. perftest's send_bw
// server measures what it received; so does this one.
func printPerftest(env *Env, b *bench, client, gbits bool) {
	line := strings.Repeat("-", 87)
	res := b.results[0]
	qps := 1 + len(res.MoreLocal)
	if !client && b.test == cm.SendBW && res.Report.Iters == 0 && res.Elapsed > 0 {
		sec := res.Elapsed.Seconds()
		msgs := float64(b.iters) * float64(qps)
		mbs := float64(b.size) * msgs / sec / (1 << 20)
		res.Report = cm.PerftestReport{Size: uint64(b.size), Iters: uint64(msgs), BWPeak: mbs, BWAvg: mbs, MsgRate: msgs / sec / 1e6}
	}
	title := perftestTitles[b.test]
	if b.test == cm.AtomicBW {
		title = "Atomic " + string(b.op) + " BW Test"
	}
	w := env.Stdout
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, "%20s%s\n", "", title)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", qps)
	fmt.Fprintf(w, " Connection type : RC\t\tDevice         : %s\n", b.dev.Name())
	fmt.Fprintf(w, " Mtu             : %d[B]\n", roce.MTU(res.MTU).Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet (%s)\n", b.dev.LinkName())
	gid := netip.AddrFrom16(res.Local.GID)
	for i, g := range b.dev.GIDs() {
		if g == gid {
			fmt.Fprintf(w, " GID index       : %d\n", i)
			break
		}
	}
	if b.test == cm.ReadBW || b.test == cm.AtomicBW {
		fmt.Fprintf(w, " Outstand reads  : %d\n", res.Local.OutReads)
	}
	if b.rdmaCM {
		fmt.Fprintf(w, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n")
	} else {
		fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	}
	fmt.Fprintln(w, line)
	if gbits {
		// perftest's --report_gbits: 10^9 bits instead of 2^20 bytes.
		const f = (1 << 20) * 8 / 1e9
		for _, r := range []*cm.PerftestReport{&res.Report, &res.PeerReport} {
			r.BWPeak, r.BWAvg = r.BWPeak*f, r.BWAvg*f
		}
	}
	lines := res.Lines(b.test)
	addrs := 4 * qps // a local and a remote address line and their GID lines per queue pair
	if gbits && len(lines) > addrs {
		lines[addrs] = strings.ReplaceAll(lines[addrs], "[MB/sec]", "[Gb/sec]")
	}
	for _, l := range lines[:addrs] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, line)
	for _, l := range lines[addrs:] {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, line)
	st := b.dev.Stats()
	fmt.Fprintf(env.Stderr, "bench %s: %s over %s, path MTU %d, retransmissions %d\n", b.name, b.dev.Name(), b.dev.LinkName(), b.pathMTU().Bytes(), st.Retransmits)
}
