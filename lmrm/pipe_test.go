package lmrm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/internal/pcaptest"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/lmrm"
	"github.com/xdproce/xdproce/roce"
)

// Two roce devices joined by link/pipe, end a's link wrapped by a capture:
// a requester on a's RC queue pair, a provider (or a bare queue pair the
// test drives, for hostile answers) on b's.
type pair struct {
	qa, qb   *roce.QP
	pda, pdb *roce.PD
	cqa, cqb *roce.CQ
	r        *lmrm.Requester
	p        *lmrm.Provider
	pcap     bytes.Buffer
	cw       *capture.Writer
	mu       sync.Mutex
	got      [][]byte // what the provider delivered, in order
}

var ips = [2]netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")}

func gid(ip netip.Addr) netip.Addr { return netip.AddrFrom16(ip.As16()) }

// newPair builds the pair; pcfg nil means no provider (the test answers
// through pr.qb itself).
func newPair(tb testing.TB, cfg lmrm.Config, pcfg *lmrm.ProviderConfig) *pair {
	tb.Helper()
	pr := &pair{}
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	if pr.cw, err = capture.NewWriter(&pr.pcap, nil); err != nil {
		tb.Fatal(err)
	}
	rs, rr, rc := cfg.QueueDepths()
	var pc lmrm.ProviderConfig
	if pcfg != nil {
		pc = *pcfg
	}
	ps, prr, pcq := pc.QueueDepths()
	depths := [2][3]int{{rs, rr, rc}, {ps, prr, pcq}}
	var qps [2]*roce.QP
	var pds [2]*roce.PD
	var cqs [2]*roce.CQ
	for i, l := range []link.Link{capture.Wrap(la, pr.cw), lb} {
		d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{ips[i]}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { d.Close() })
		pds[i] = d.AllocPD()
		if cqs[i], err = d.CreateCQ(depths[i][2]); err != nil {
			tb.Fatal(err)
		}
		if qps[i], err = pds[i].CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cqs[i], RecvCQ: cqs[i],
			MaxSendWR: depths[i][0], MaxRecvWR: depths[i][1]}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range 2 {
		j := 1 - i
		if err := qps[i].Connect(0x100*uint32(i+1), roce.Endpoint{QPN: qps[j].QPN(), PSN: 0x100 * uint32(j+1), GID: gid(ips[j])}, nil); err != nil {
			tb.Fatal(err)
		}
	}
	pr.qa, pr.qb, pr.pda, pr.pdb, pr.cqa, pr.cqb = qps[0], qps[1], pds[0], pds[1], cqs[0], cqs[1]
	if pcfg != nil {
		if pr.p, err = lmrm.NewProvider(qps[1], pds[1], cqs[1], pcfg, func(_ uint8, _ uint32, b []byte) {
			pr.mu.Lock()
			pr.got = append(pr.got, append([]byte(nil), b...))
			pr.mu.Unlock()
		}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { qps[1].Destroy(); pr.p.Close() })
	}
	if pr.r, err = lmrm.NewRequester(qps[0], pds[0], cqs[0], &cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { qps[0].Destroy(); pr.r.Close() })
	return pr
}

// step runs both ends' Progress once.
func (pr *pair) step(tb testing.TB) {
	tb.Helper()
	if err := pr.r.Progress(); err != nil {
		tb.Fatal(err)
	}
	if pr.p != nil {
		if err := pr.p.Progress(); err != nil {
			tb.Fatal(err)
		}
	}
}

// until steps until cond holds (10 s at most).
func (pr *pair) until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within 10 s (requester %+v)", what, pr.r.Stats())
		}
		pr.step(tb)
		time.Sleep(5 * time.Microsecond)
	}
}

// alloc asks for bytes in slots of slot and waits for the pool.
func (pr *pair) alloc(tb testing.TB, bytes uint64, slot uint32) {
	tb.Helper()
	n := pr.r.Stats().Pools
	if err := pr.r.Alloc(bytes, slot); err != nil {
		tb.Fatal(err)
	}
	pr.until(tb, "pool granted", func() bool { return pr.r.Stats().Pools > n })
}

// frames describes the capture of end a as dump does, checking each frame.
func (pr *pair) frames(tb *testing.T) []*capture.Record {
	tb.Helper()
	if err := pr.cw.Flush(); err != nil {
		tb.Fatal(err)
	}
	return pcaptest.Describe(tb, pr.pcap.Bytes())
}

// count counts frames by direction, opcode and the payload's message kind
// ("out RC_SEND_ONLY LMRM_ALLOC", "out RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE").
// A frame RC retransmitted (same direction, opcode and PSN: the pipe's
// queue overflowed under a burst) counts once.
func count(recs []*capture.Record) map[string]int {
	m := map[string]int{}
	type key struct {
		dir, op string
		psn     uint32
	}
	seen := map[key]bool{}
	for _, r := range recs {
		k := key{r.Dir, r.BTH.Opcode, r.BTH.PSN}
		if seen[k] {
			m["retransmitted"]++
			continue
		}
		seen[k] = true
		name := r.Dir + " " + r.BTH.Opcode
		if r.Payload != "" {
			name += " " + strings.Fields(r.Payload)[0]
		}
		m[name]++
	}
	return m
}

// TestPipeTenThousand: 10,000 messages of random sizes up to the slot size
// through a pool of 64 slots arrive byte-exact and in order, with one
// LMRM_ALLOC, one LMRM_ALLOC_ACK, 10000/16 LMRM_RELEASEs and one data write
// per message on the wire, and no other control frame.
func TestPipeTenThousand(t *testing.T) { pipeMessages(t, 10000, 0, 16) }

// TestPipeBatchOne: a release per message keeps more LMRM_RELEASEs due than
// the provider has send buffers; the ones held back go out together, and
// no slot is lost.
func TestPipeBatchOne(t *testing.T) { pipeMessages(t, 2000, 1, 1) }

func pipeMessages(t *testing.T, msgs, cfgBatch, batch int) {
	const slot, slots = 512, 64
	pr := newPair(t, lmrm.Config{}, &lmrm.ProviderConfig{Batch: cfgBatch})
	pr.alloc(t, slot*slots, slot)
	if st := pr.r.Stats(); st.Free != slots {
		t.Fatalf("pool of %d free slots, want %d", st.Free, slots)
	}
	if st := pr.p.Stats(); st.RegisteredBytes != slot*slots || st.Pools != 1 {
		t.Fatalf("provider %+v, want %d registered bytes in one pool", st, slot*slots)
	}
	seed := uint32(12345)
	var sent [][]byte
	for len(sent) < msgs {
		s, err := pr.r.Reserve()
		if errors.Is(err, lmrm.ErrExhausted) {
			pr.step(t)
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		seed = seed*1664525 + 1013904223
		b := make([]byte, int(seed>>8)%(slot+1))
		for i := range b {
			seed = seed*1664525 + 1013904223
			b[i] = byte(seed >> 24)
		}
		for {
			err := pr.r.Write(s, b)
			if err == nil {
				break
			}
			if !errors.Is(err, lmrm.ErrBusy) {
				t.Fatal(err)
			}
			pr.step(t)
		}
		sent = append(sent, b)
	}
	pr.until(t, "all delivered and released", func() bool {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		return len(pr.got) == msgs && pr.r.Stats().Free == slots
	})
	for i := range sent {
		if !bytes.Equal(sent[i], pr.got[i]) {
			t.Fatalf("message %d: delivered %d B differ from the %d B sent", i, len(pr.got[i]), len(sent[i]))
		}
	}
	// With batch 1 the provider's send buffers fill up, and the releases
	// held back go out together: fewer messages than slots.
	releases := msgs / batch
	if batch == 1 {
		releases = pr.r.Stats().Releases
		if releases < msgs/lmrm.MaxRelease || releases > msgs {
			t.Errorf("%d releases for %d messages", releases, msgs)
		}
	}
	c := count(pr.frames(t))
	t.Logf("%d frames retransmitted, %d releases", c["retransmitted"], releases)
	delete(c, "retransmitted")
	want := map[string]int{
		"out RC_SEND_ONLY LMRM_ALLOC":           1,
		"in RC_SEND_ONLY LMRM_ALLOC_ACK":        1,
		"in RC_SEND_ONLY LMRM_RELEASE":          releases,
		"out RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE": msgs,
	}
	for k, n := range want {
		if c[k] != n {
			t.Errorf("%d frames %q, want %d", c[k], k, n)
		}
	}
	for k, n := range c {
		if _, ok := want[k]; !ok && !strings.HasSuffix(k, " RC_ACKNOWLEDGE") {
			t.Errorf("%d unexpected frames %q", n, k)
		}
	}
	if st := pr.r.Stats(); st.Releases != releases || st.AllocsSent != 1 {
		t.Errorf("requester stats %+v", st)
	}
}
