package roce_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// counter returns a snapshot counter, failing the test when it is missing.
func counter(tb testing.TB, cs roce.Counters, name string) uint64 {
	tb.Helper()
	v, ok := cs.Get(name)
	if !ok {
		tb.Fatalf("no counter %q in %v", name, cs)
	}
	return v
}

func TestSnapshotCountsSends(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x, y := connectRC(t, p, connCfg{})
	before := p.a.Snapshot(false)
	const n, size = 3, 4096 // 4 packets each at the pipe's path MTU 1024 or more
	for i := range n {
		if err := y.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{y.sge(dstOff, size)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: qp.WRSend, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(srcOff, size)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, x.scq); wc.Status != qp.WCSuccess {
			t.Fatalf("send completion %v", wc.Status)
		}
		if wc := waitWC(t, y.rcq); wc.Status != qp.WCSuccess {
			t.Fatalf("receive completion %v", wc.Status)
		}
	}
	// A WRITE counts packets but no SEND or receive.
	if err := x.qp.PostSend(roce.SendWR{ID: 9, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(srcOff, size)}, RemoteAddr: y.mr.Addr() + dstOff, RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, x.scq)

	a, b := p.a.Snapshot(true), p.b.Snapshot(true)
	pkts := uint64(size / p.a.PathMTU().Bytes())
	if got := counter(t, a.Counters, "sent_pkts") - counter(t, before.Counters, "sent_pkts"); got < (n+1)*pkts {
		t.Errorf("sender's sent_pkts rose by %d, want at least %d", got, (n+1)*pkts)
	}
	if got := counter(t, b.Counters, "rcvd_pkts"); got < (n+1)*pkts {
		t.Errorf("receiver's rcvd_pkts = %d, want at least %d", got, (n+1)*pkts)
	}
	// The receiver's ACKs reach the sender's queue pair.
	if got := counter(t, a.Counters, "rcvd_pkts"); got == 0 {
		t.Error("sender's rcvd_pkts = 0: no ACK counted")
	}
	for _, c := range []struct {
		s    *roce.Snapshot
		name string
		want uint64
	}{
		{a, "rdma_sends", n}, {a, "rdma_recvs", 0}, {b, "rdma_sends", 0}, {b, "rdma_recvs", n},
		{a, "send_err", 0}, {a, "icrc_errors", 0}, {a, "retry_exceeded_err", 0}, {a, "ack_deferred", 0},
	} {
		if got := counter(t, c.s.Counters, c.name); got != c.want {
			t.Errorf("%s: %s = %d, want %d", c.s.Link, c.name, got, c.want)
		}
	}
	if a.QPs != 1 || len(a.PerQP) != 1 || a.PerQP[0].QPN != x.qp.QPN() || a.PerQP[0].State != "RTS" || a.PerQP[0].Type != "RC" {
		t.Fatalf("per-QP snapshot %+v, want x's QP %#x in RTS", a.PerQP, x.qp.QPN())
	}
	if got := counter(t, a.PerQP[0].Counters, "rdma_sends"); got != n {
		t.Errorf("per-QP rdma_sends = %d, want %d", got, n)
	}
	if a.XDP != nil || a.XDPError != "" {
		t.Errorf("a pipe device reports XDP counters %v %q", a.XDP, a.XDPError)
	}

	// JSON keeps names and order.
	js, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back roce.Snapshot
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a.Counters, back.Counters); d != "" {
		t.Errorf("counters after a JSON round trip (-want +got):\n%s", d)
	}
	if d := cmp.Diff(a.PerQP, back.PerQP); d != "" {
		t.Errorf("per-QP counters after a JSON round trip (-want +got):\n%s", d)
	}

	// A destroyed queue pair's counts stay in the device's.
	if err := x.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, p.a.Snapshot(false).Counters, "rdma_sends"); got != n {
		t.Errorf("rdma_sends after the QP was destroyed = %d, want %d", got, n)
	}
}

// A peer that never answers: the sender retries retry_cnt times, then fails
// with RETRY_EXC_ERR; the receiving device drops the frames for a QPN it
// does not have.
func TestSnapshotCountsRetryExceeded(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	o := roce.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = 8, 2 // ≈ 1 ms
	x, y := connectRC(t, p, connCfg{opts: &o})
	if err := y.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(srcOff, 64)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != qp.WCRetryExcErr {
		t.Fatalf("completion %v, want %v", wc.Status, qp.WCRetryExcErr)
	}
	a, b := p.a.Snapshot(false), p.b.Snapshot(false)
	for _, c := range []struct {
		name string
		want uint64
	}{{"retry_exceeded_err", 1}, {"completer_retry_err", 2}, {"timeouts", 3}, {"retransmits", 2}, {"sent_pkts", 3}} {
		if got := counter(t, a.Counters, c.name); got != c.want {
			t.Errorf("%s = %d, want %d", c.name, got, c.want)
		}
	}
	if got := counter(t, b.Counters, "unknown_qpn"); got != 3 {
		t.Errorf("receiver's unknown_qpn = %d, want 3", got)
	}
	if got := counter(t, b.Counters, "rcvd_pkts"); got != 0 {
		t.Errorf("receiver's rcvd_pkts = %d, want 0 (no frame reached a queue pair)", got)
	}
}

// A receiver without receive work requests: RNR NAKs until rnr_retry is
// spent.
func TestSnapshotCountsRNR(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	o := roce.DefaultConnectOptions()
	o.RNRRetry, o.MinRNRTimer = 1, 1 // 0.01 ms
	x, _ := connectRC(t, p, connCfg{opts: &o})
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(srcOff, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != qp.WCRNRRetryExcErr {
		t.Fatalf("completion %v, want %v", wc.Status, qp.WCRNRRetryExcErr)
	}
	a, b := p.a.Snapshot(false), p.b.Snapshot(false)
	if got := counter(t, a.Counters, "rcvd_rnr_err"); got != 2 {
		t.Errorf("rcvd_rnr_err = %d, want 2", got)
	}
	if got := counter(t, a.Counters, "retry_rnr_exceeded_err"); got != 1 {
		t.Errorf("retry_rnr_exceeded_err = %d, want 1", got)
	}
	if got := counter(t, b.Counters, "send_rnr_err"); got != 2 {
		t.Errorf("receiver's send_rnr_err = %d, want 2", got)
	}
	// The failed SEND completed in error: rxe counts it too.
	if got := counter(t, a.Counters, "rdma_sends"); got != 1 {
		t.Errorf("rdma_sends = %d, want 1", got)
	}
}

// TestSnapshotNamesDocumented keeps docs/counters.md in step with Snapshot:
// every counter a snapshot reports has a row there.
func TestSnapshotNamesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/counters.md")
	if err != nil {
		t.Fatal(err)
	}
	p, _, _ := newPipeDevices(t, pipe.Config{})
	connectRC(t, p, connCfg{})
	s := p.a.Snapshot(true)
	names := append(roce.Counters(nil), s.Counters...)
	names = append(names, s.PerQP[0].Counters...)
	for _, c := range names {
		if !strings.Contains(string(doc), "`"+c.Name+"`") {
			t.Errorf("docs/counters.md does not describe %s", c.Name)
		}
	}
}
