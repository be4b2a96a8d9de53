package qp

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestSRFaultMix: mixed WRITE/READ/SEND/FETCH_ADD traffic with selective
// repeat on both ends over the timed network with loss, reorder,
// duplicates and corruption: every WR succeeds with the right bytes and
// results (runNetMixed checks them), SENDs complete in order, and the
// responder held packets past holes and SACKed them instead of NAKing.
func TestSRFaultMix(t *testing.T) {
	// Seeds 7 and 20 stalled READ ranges (a READ done behind an
	// unanswered atomic; a READ re-requested before it was ever sent).
	seeds := []uint64{0, 1, 2, 3, 7, 20}
	if *long {
		seeds = seeds[:0]
		for s := range uint64(32) {
			seeds = append(seeds, s)
		}
	}
	mc := mixCfg{wrs: 300, outstanding: 32, maxMsg: 64 << 10, pWrite: 3, pRead: 1, pSend: 2, pAdd: 1}
	for _, seed := range seeds {
		o := defaultOpts()
		o.window, o.maxWR, o.sr = 256, 64, true
		cfg := netCfg{delay: 48_000, perFrame: 4000, tick: 2000, loss: 0.03, reorder: 0.02, dup: 0.01, corrupt: 0.001}
		r := newNetRun(t, o, cfg, seed)
		st := runNetMixed(t, r, mc, seed)
		if st.failed != nil {
			t.Fatalf("seed %d: a WR failed", seed)
		}
		sa, sb := r.a.q.Stats(), r.b.q.Stats()
		t.Logf("seed %d: %.1f ms; a: retransmits %d selective %d sacks_recv %d timeouts %d fast %d; b: held %d sacks_sent %d seqNAKs %d",
			seed, float64(st.elapsedNs)/1e6, sa.Get(CtrRetransmits), sa.Get(CtrSRRetransmits), sa.Get(CtrSACKsRecv),
			sa.Get(CtrTimeouts), sa.Get(CtrFastRetransmits), sb.Get(CtrSROutOfSequence), sb.Get(CtrSACKsSent), sb.Get(CtrSeqNAKsSent))
		if sb.Get(CtrSeqNAKsSent) != 0 {
			t.Errorf("seed %d: the SR responder sent %d PSN sequence NAKs", seed, sb.Get(CtrSeqNAKsSent))
		}
		if sb.Get(CtrSROutOfSequence) == 0 || sb.Get(CtrSACKsSent) == 0 || sa.Get(CtrSACKsRecv) == 0 || sa.Get(CtrSRRetransmits) == 0 {
			t.Errorf("seed %d: no selective repeat happened", seed)
		}
	}
}

// srStream WRITEs (or SENDs) total bytes in 64 KiB messages from a to b
// over the timed network at cfg, 16 outstanding, and checks the bytes that
// landed. It returns the run.
func srStream(t *testing.T, sr bool, op WROpcode, total int, cfg netCfg, seed uint64) (*netRun, int64) {
	t.Helper()
	o := defaultOpts()
	o.mtu, o.window, o.maxWR, o.sr = wire.MTU4096, 256, 64, sr
	return srStreamWith(t, o, 16, op, total, cfg, seed, nil)
}

// srStreamWith is srStream with the queue pairs' options o, depth messages
// outstanding, and drop as the run's drop hook.
func srStreamWith(t *testing.T, o pairOpts, depth int, op WROpcode, total int, cfg netCfg, seed uint64,
	drop func(*netEnd, *wire.Packet) bool) (*netRun, int64) {
	t.Helper()
	sr := o.sr
	r := newNetRun(t, o, cfg, seed)
	r.drop = drop
	a, b := r.a, r.b
	const msg = 64 << 10
	src, srcBuf := a.reg(t, total, allAcc)
	dst, dstBuf := b.reg(t, total, allAcc)
	if op == WRRDMARead {
		fill(dstBuf, byte(seed)) // A reads B's buffer into its own
	} else {
		fill(srcBuf, byte(seed))
	}
	posted, done, recvs, recvPosted := 0, 0, 0, 0
	n := total / msg
	wcs := make([]WC, 32)
	start := r.now
	for done < n || (op == WRSend && recvs < n) {
		for op == WRSend && recvPosted < n && recvPosted-recvs < depth {
			must(t, b.q.PostRecv(&RecvWR{ID: uint64(recvPosted), SGL: []mr.SGE{sge(dst, recvPosted*msg, msg)}}))
			recvPosted++
		}
		for posted < n && posted-done < depth {
			wr := SendWR{ID: uint64(posted), Opcode: op, Flags: Signaled, SGL: []mr.SGE{sge(src, posted*msg, msg)}}
			if op == WRRDMAWrite || op == WRRDMARead {
				wr.RemoteAddr, wr.RKey = dst.Addr()+uint64(posted*msg), dst.RKey()
			}
			must(t, a.q.PostSend(&wr))
			posted++
		}
		r.step()
		if r.now-start > 60e9 {
			t.Fatalf("sr=%v seed %d: %d of %d messages after 60 s\n%s\n%s", sr, seed, done, n, a.q.dump(), b.q.dump())
		}
		k, _ := a.cq.Poll(wcs)
		for _, w := range wcs[:k] {
			if w.Status != WCSuccess || w.ID != uint64(done) {
				t.Fatalf("sr=%v seed %d: WC %+v, want ID %d", sr, seed, w, done)
			}
			done++
		}
		k, _ = b.cq.Poll(wcs)
		for _, w := range wcs[:k] {
			if w.Status != WCSuccess || w.ID != uint64(recvs) || w.ByteLen != msg {
				t.Fatalf("sr=%v seed %d: receive WC %+v, want ID %d", sr, seed, w, recvs)
			}
			recvs++
		}
	}
	if !bytes.Equal(srcBuf, dstBuf) {
		t.Fatalf("sr=%v seed %d: the bytes that landed differ", sr, seed)
	}
	return r, r.now - start
}

// TestSRFewerRetransmits: the same 4 MiB WRITE and SEND streams with the
// same seed at 5 % loss and 2 % reorder, go-back-N and selective repeat:
// both land every byte; selective repeat resends fewer packets and takes
// less (simulated) time.
func TestSRFewerRetransmits(t *testing.T) {
	cfg := netCfg{delay: 20_000, perFrame: 3000, tick: 2000, loss: 0.05, reorder: 0.02}
	for _, op := range []WROpcode{WRRDMAWrite, WRSend} {
		for seed := range uint64(2) {
			g, gt := srStream(t, false, op, 4<<20, cfg, seed)
			s, st := srStream(t, true, op, 4<<20, cfg, seed)
			gr, sr := g.a.q.Stats().Get(CtrRetransmits), s.a.q.Stats().Get(CtrRetransmits)
			t.Logf("%v seed %d: go-back-N %d retransmits %.1f ms; selective repeat %d retransmits (%d selective) %.1f ms",
				op, seed, gr, float64(gt)/1e6, sr, s.a.q.Stats().Get(CtrSRRetransmits), float64(st)/1e6)
			if sr >= gr || st >= gt {
				t.Errorf("%v seed %d: selective repeat resent %d in %d ns, go-back-N %d in %d ns", op, seed, sr, st, gr, gt)
			}
		}
	}
}

// TestSRReadFewerResends (issue 20): streams of 64 KiB RDMA READs (16
// outstanding) at 5 % loss and 2 % reorder each way, go-back-N and
// selective repeat, the same seeds, on two paths: 4 MiB at a 4096 MTU with
// 20 µs each way, and 8 MiB at a 1024 MTU with 100 µs each way, 8 µs per
// frame and the CLI's 67 ms local ACK timeout (the relay's shape). Both
// land every byte; with selective repeat the requester places responses
// past a hole and re-requests only missing ranges, so fewer response bytes
// cross the link again (those arriving beyond the stream's size), some
// requests ask for a range short of their READ's end (none with
// go-back-N), and the stream takes less simulated time.
func TestSRReadFewerResends(t *testing.T) {
	for _, path := range []struct {
		name    string
		cfg     netCfg
		mtu     wire.MTU
		total   int
		timeout uint8
	}{
		{"4096", netCfg{delay: 20_000, perFrame: 3000, tick: 2000, loss: 0.05, reorder: 0.02}, wire.MTU4096, 4 << 20, 10},
		{"relay", netCfg{delay: 100_000, perFrame: 8000, tick: 2000, loss: 0.05, reorder: 0.02}, wire.MTU1024, 8 << 20, 14},
	} {
		for seed := range uint64(3) {
			var extra, reqs, partial [2]int
			var took [2]int64
			var replays [2]uint64
			for i, sr := range []bool{false, true} {
				o := defaultOpts()
				o.mtu, o.window, o.maxWR, o.sr, o.timeout = path.mtu, 1024, 64, sr, path.timeout
				if sr {
					o.srWindow = SRHold
				}
				var run *netRun
				var base uint64
				run, took[i] = srStreamWith(t, o, 16, WRRDMARead, path.total, path.cfg, seed, func(e *netEnd, p *wire.Packet) bool {
					switch info, _ := p.BTH.Opcode.Info(); {
					case info.Kind == wire.KindReadResponse:
						extra[i] += len(p.Payload)
					case p.BTH.Opcode == wire.RCReadRequest:
						if reqs[i]++; reqs[i] == 1 {
							base = p.RETH.VA // the first READ's, at the buffer's start
						}
						if (p.RETH.VA+uint64(p.RETH.DMALen)-base)%(64<<10) != 0 {
							partial[i]++
						}
					}
					return false
				})
				extra[i] -= path.total
				replays[i] = run.b.q.Stats().Get(CtrReplays)
			}
			t.Logf("%s seed %d: go-back-N %d response bytes again, %d READ requests (%d replayed), %.1f ms; selective repeat %d bytes again, %d requests (%d replayed, %d for a range short of the end), %.1f ms",
				path.name, seed, extra[0], reqs[0], replays[0], float64(took[0])/1e6, extra[1], reqs[1], replays[1], partial[1], float64(took[1])/1e6)
			if extra[1] >= extra[0] || partial[0] != 0 || partial[1] == 0 || took[1] >= took[0] {
				t.Errorf("%s seed %d: response bytes again: sr %d, gbn %d; ranges short of the READ's end: sr %d, gbn %d; %d ns against %d (want fewer bytes, some ranges for sr, none for gbn, less time)",
					path.name, seed, extra[1], extra[0], partial[1], partial[0], took[1], took[0])
			}
		}
	}
}

// TestSRLongWindow: on a path whose bandwidth-delay product is ~670
// packets (1 ms each way, 3 µs per 4 KiB frame), an 8 MiB WRITE stream at
// 5 % loss and 2 % reorder with 64 messages (1024 PSNs) outstanding: with
// the peer holding SRHold PSNs (Attr.SRWindow) the window reaches 1024,
// SACKs longer than 32 bytes say what is held more than 256 PSNs past a
// hole, every byte lands and the stream takes less simulated time than
// with the first format's 256-PSN window (SRWindow 0, only 32-byte
// SACKs), which cannot fill the path.
func TestSRLongWindow(t *testing.T) {
	cfg := netCfg{delay: 1_000_000, perFrame: 3000, tick: 2000, loss: 0.05, reorder: 0.02}
	for seed := range uint64(2) {
		var took [2]int64
		var longest [2]int
		for i, win := range []uint32{0, SRHold} {
			o := defaultOpts()
			o.mtu, o.window, o.maxWR, o.sr, o.srWindow, o.txBufs = wire.MTU4096, 1024, 128, true, win, 2048
			_, took[i] = srStreamWith(t, o, 64, WRRDMAWrite, 8<<20, cfg, seed, func(e *netEnd, p *wire.Packet) bool {
				if p.BTH.Opcode == wire.SRSack {
					longest[i] = max(longest[i], len(p.Payload))
				}
				return false
			})
		}
		t.Logf("seed %d: 256-PSN window %.1f ms (longest SACK %d bytes); %d-PSN hold, 1024-PSN window %.1f ms (longest SACK %d bytes)",
			seed, float64(took[0])/1e6, longest[0], SRHold, float64(took[1])/1e6, longest[1])
		if longest[0] != wire.SACKLen || longest[1] <= wire.SACKLen {
			t.Errorf("seed %d: longest SACKs %d and %d bytes, want %d and more", seed, longest[0], longest[1], wire.SACKLen)
		}
		if took[1] >= took[0] {
			t.Errorf("seed %d: the long window took %d ns, the 256-PSN one %d", seed, took[1], took[0])
		}
	}
}

// TestSRInOrderCompletion: with one SEND packet lost once, the later SENDs
// arrive and are held, and no receive completes until the lost packet is
// resent; then all complete in order with their bytes, after one selective
// retransmission (not a go-back-N).
func TestSRInOrderCompletion(t *testing.T) {
	o := defaultOpts()
	o.sr = true
	lost := false
	o.f.drop = func(from *end, p *wire.Packet) bool {
		if from.name == "A" && p.BTH.PSN == 0x1001 && !lost {
			lost = true
			return true
		}
		return false
	}
	pr := newPair(t, o)
	a, b := pr.a, pr.b
	src, srcBuf := a.reg(t, 8*1024, allAcc)
	dst, dstBuf := b.reg(t, 8*1024, allAcc)
	fill(srcBuf, 7)
	for i := range 8 {
		must(t, b.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(dst, i*1024, 1024)}}))
	}
	for i := range 8 {
		must(t, a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(src, i*1024, 1024)}}))
	}
	// One round: A sends all 8, B holds 7 past the hole and completes only
	// the first.
	pr.step()
	got := make([]WC, 8)
	if k, _ := b.cq.Poll(got); k != 1 || got[0].ID != 0 {
		t.Fatalf("after the first round the receiver completed %+v, want only WR 0", got[:k])
	}
	if n := b.q.Stats().Get(CtrSROutOfSequence); n != 6 {
		t.Fatalf("held %d packets, want 6", n)
	}
	if !pr.run(func() bool { return a.q.sqDone.Load() == 8 && b.q.rqDone.Load() == 8 }, 1000) {
		t.Fatalf("not done\n%s\n%s", a.q.dump(), b.q.dump())
	}
	if !bytes.Equal(srcBuf, dstBuf) {
		t.Fatal("the bytes differ")
	}
	sa := a.q.Stats()
	if sa.Get(CtrRetransmits) != 1 || sa.Get(CtrSRRetransmits) != 1 || b.q.Stats().Get(CtrSeqNAKsSent) != 0 {
		t.Fatalf("retransmits %d (selective %d), seq NAKs %d: want one selective retransmit, no NAK",
			sa.Get(CtrRetransmits), sa.Get(CtrSRRetransmits), b.q.Stats().Get(CtrSeqNAKsSent))
	}
}

// TestSRRNRUnderLoss: with selective repeat, SENDs that find no receive
// WQE (RNR NAK) while packets are also lost and reordered still complete,
// in order and byte-exact, once receives are posted.
func TestSRRNRUnderLoss(t *testing.T) {
	for seed := range uint64(8) {
		o := defaultOpts()
		o.sr, o.minRNR = true, 1
		o.f = faults{loss: 0.05, reorder: 0.05, dup: 0.02, seed: seed}
		pr := newPair(t, o)
		a, b := pr.a, pr.b
		const n, size = 16, 3000
		src, srcBuf := a.reg(t, n*size, allAcc)
		dst, dstBuf := b.reg(t, n*size, allAcc)
		fill(srcBuf, byte(seed))
		for i := range n {
			must(t, a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(src, i*size, size)}}))
		}
		for range 20 {
			pr.step()
		}
		for i := range n {
			must(t, b.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(dst, i*size, size)}}))
		}
		got := pr.poll(b, n)
		for i, w := range got {
			if w.Status != WCSuccess || w.ID != uint64(i) || w.ByteLen != size {
				t.Fatalf("seed %d: receive %d: %+v", seed, i, w)
			}
		}
		for i, w := range pr.poll(a, n) {
			if w.Status != WCSuccess || w.ID != uint64(i) {
				t.Fatalf("seed %d: send %d: %+v", seed, i, w)
			}
		}
		if !bytes.Equal(srcBuf, dstBuf) {
			t.Fatalf("seed %d: the bytes differ", seed)
		}
		if b.q.Stats().Get(CtrRNRNAKsSent) == 0 {
			t.Fatalf("seed %d: no RNR NAK was sent", seed)
		}
	}
}

// TestSRReadLong: one 8 MiB READ (8192 responses of 1 KiB, four times the
// PSNs the requester can hold past a hole) at 5 % loss and 2 % reorder
// with selective repeat: it completes with every byte, re-requesting
// ranges, within the simulated minute.
func TestSRReadLong(t *testing.T) {
	cfg := netCfg{delay: 20_000, perFrame: 1000, tick: 2000, loss: 0.05, reorder: 0.02}
	for seed := range uint64(2) {
		o := defaultOpts()
		o.window, o.sr, o.srWindow = 1024, true, SRHold
		r := newNetRun(t, o, cfg, seed)
		const total = 8 << 20
		dst, dstBuf := r.a.reg(t, total, allAcc)
		src, srcBuf := r.b.reg(t, total, allAcc)
		fill(srcBuf, byte(seed+3))
		must(t, r.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMARead, Flags: Signaled, SGL: []mr.SGE{sge(dst, 0, total)},
			RemoteAddr: src.Addr(), RKey: src.RKey()}))
		start := r.now
		wcs := make([]WC, 1)
		for {
			r.step()
			if k, _ := r.a.cq.Poll(wcs); k == 1 {
				if wcs[0].Status != WCSuccess {
					t.Fatalf("seed %d: WC %+v", seed, wcs[0])
				}
				break
			}
			if r.now-start > 60e9 {
				t.Fatalf("seed %d: no completion after 60 s\n%s\n%s", seed, r.a.q.dump(), r.b.q.dump())
			}
		}
		st := r.a.q.Stats()
		t.Logf("seed %d: %.1f ms, %d re-requests (%d selective), %d replays at the responder", seed, float64(r.now-start)/1e6,
			st.Get(CtrRetransmits), st.Get(CtrSRRetransmits), r.b.q.Stats().Get(CtrReplays))
		if !bytes.Equal(srcBuf, dstBuf) {
			t.Fatalf("seed %d: the bytes read differ", seed)
		}
	}
}

// TestSRAckCadence: a loss-free stream of 1 MiB WRITEs at a 1024-PSN
// window (1024-byte MTU, 1024 packets a message) is acknowledged every
// 64th packet with go-back-N, as rxe's requester asks; with selective
// repeat, whose requester asks every half window (and on the packet that
// fills it) and whose responder waits as long (wantAckReq,
// respAcknowledge), by at most half as many ACKs, and no fewer than one
// every 512 packets. Both land every byte.
func TestSRAckCadence(t *testing.T) {
	cfg := netCfg{delay: 20_000, perFrame: 1000, tick: 2000}
	const msgs, msg = 4, 1 << 20
	var got [2]int
	for i, sr := range []bool{false, true} {
		o := defaultOpts()
		o.mtu, o.window, o.maxWR, o.sr, o.txBufs = wire.MTU1024, 1024, 16, sr, 2048
		if sr {
			o.srWindow = SRHold
		}
		r := newNetRun(t, o, cfg, 1)
		var acks, requests int
		r.drop = func(to *netEnd, p *wire.Packet) bool {
			switch {
			case to == r.a && p.BTH.Opcode == wire.RCAck:
				acks++
			case to == r.b:
				requests++
			}
			return false
		}
		a, b := r.a, r.b
		src, srcBuf := a.reg(t, msgs*msg, allAcc)
		dst, dstBuf := b.reg(t, msgs*msg, allAcc)
		fill(srcBuf, 7)
		for i := range msgs {
			must(t, a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(src, i*msg, msg)},
				RemoteAddr: dst.Addr() + uint64(i*msg), RKey: dst.RKey()}))
		}
		wcs := make([]WC, msgs)
		start := r.now
		for done := 0; done < msgs; {
			r.step()
			if r.now-start > 10e9 {
				t.Fatalf("sr=%v: %d of %d WRITEs after 10 s", sr, done, msgs)
			}
			k, _ := a.cq.Poll(wcs)
			for _, w := range wcs[:k] {
				if w.Status != WCSuccess {
					t.Fatalf("sr=%v: %+v", sr, w)
				}
				done++
			}
		}
		if !bytes.Equal(srcBuf, dstBuf) {
			t.Fatalf("sr=%v: the bytes that landed differ", sr)
		}
		every := 64
		if sr {
			every = 512 // half the window
		}
		if acks < requests/every {
			t.Errorf("sr=%v: %d ACKs for %d requests, want at least one every %d", sr, acks, requests, every)
		}
		t.Logf("sr=%v: %d ACKs for %d requests", sr, acks, requests)
		got[i] = acks
	}
	if got[1] > got[0]/2 {
		t.Errorf("%d ACKs with selective repeat, %d with go-back-N: want at most half as many", got[1], got[0])
	}
}
