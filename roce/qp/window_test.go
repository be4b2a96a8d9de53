package qp

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdproce/xdproce/roce/wire"
)

// winDriver plays requester and completer around a send window alone (no
// QP, no link), as the engines call it, and counts what the window reports.
type winDriver struct {
	t   *testing.T
	w   sendWindow
	now int64

	fast, timeouts, spurious, resent int
}

// winSnap is the window's state the tests compare, and the driver's counts.
type winSnap struct {
	Una, Max, Cwnd, Ssthresh uint32
	Recovering               bool
	RecoverPSN               uint32
	SRTT, RTTVar, MinRTT     int64
	Deadline, FastDeadline   int64
	FastTries                uint8
	Undo                     bool
	RNRUntil                 int64

	Fast, Timeouts, Spurious, Resent int
}

func (d *winDriver) snap() winSnap {
	w := &d.w
	return winSnap{Una: w.una, Max: w.max, Cwnd: w.cwnd, Ssthresh: w.ssthresh, Recovering: w.recovering,
		RecoverPSN: w.recoverPSN, SRTT: w.srtt, RTTVar: w.rttvar, MinRTT: w.minRTT, Deadline: w.deadline,
		FastDeadline: w.fastDeadline, FastTries: w.fastTries, Undo: w.undo, RNRUntil: w.rnrUntil,
		Fast: d.fast, Timeouts: d.timeouts, Spurious: d.spurious, Resent: d.resent}
}

// at moves the clock.
func (d *winDriver) at(now int64) *winDriver { d.now = now; return d }

// send sends PSNs from..to-1, one packet each, AckReq on the last, as far
// as the window allows; it returns the PSN after the last one sent.
func (d *winDriver) send(from, to uint32) uint32 {
	for psn := from; psn != to; psn++ {
		if !d.w.canSend(psn, d.now) {
			return psn
		}
		if d.w.sent(psn, psn+1, psn+1 == to, 0, d.now) {
			d.resent++
		}
	}
	return to
}

// ack is the completer's ACK of everything before psn: the window advances,
// and only progress is reported to it (a repeated ACK is not).
func (d *winDriver) ack(psn uint32) bool {
	before := d.w.unacked()
	if !d.w.advance(psn, d.now) {
		return false
	}
	if d.w.acked(before, d.now) {
		d.spurious++
	}
	return true
}

// nak is a PSN sequence error NAK at psn: it acknowledges what is before
// psn, then the requester goes back to psn.
func (d *winDriver) nak(psn uint32) {
	d.ack(psn)
	d.w.loss(true)
	d.w.resend(psn)
}

// tick fires the timers due; the requester goes back to the oldest
// unacknowledged PSN when one fired.
func (d *winDriver) tick(now int64) {
	d.now = now
	fast, timeout := d.w.expired(now)
	if fast {
		d.fast++
	}
	if timeout {
		d.timeouts++
	}
	if fast || timeout {
		d.w.resend(d.w.unacked())
	}
}

func (d *winDriver) expect(ok bool, format string, args ...any) {
	d.t.Helper()
	if !ok {
		d.t.Errorf(format, args...)
	}
}

const (
	winPSN   = 1000
	winLimit = 1024
	winTO    = 4096 << 14 // timeoutNs(14)
)

// warm is a window that has sent PSNs 1000..1009 at 0 (AckReq on 1000 and
// 1009) and had them acknowledged at 10 µs: one round trip of 10 µs
// sampled, the window grown by 10 from 128, nothing outstanding.
func warm(d *winDriver) {
	d.at(0).send(winPSN, winPSN+1) // the sample starts on an AckReq packet
	d.send(winPSN+1, winPSN+10)
	d.at(10_000).ack(winPSN + 10)
}

// partialAck sends 1010..1019 from a warm window at 20 µs and has 1010..1014
// acknowledged at 30 µs.
func partialAck(d *winDriver) {
	warm(d)
	d.at(20_000).send(1010, 1020) // rto 2·10+4·5 = 40 µs
	d.expect(d.w.fastDeadline == 60_000, "fast deadline %d, want 60000", d.w.fastDeadline)
	d.at(30_000).ack(1015)
}

func TestSendWindow(t *testing.T) {
	tests := []struct {
		name  string
		fixed bool
		run   func(d *winDriver)
		want  winSnap
	}{
		{
			name: "ACK: slow start, RTT sample, timers stop when nothing is outstanding",
			run: func(d *winDriver) {
				d.at(0).send(winPSN, winPSN+1)
				d.expect(d.w.deadline == winTO, "local ACK timer %d after the first packet, want %d", d.w.deadline, winTO)
				d.expect(d.w.fastDeadline == 0, "fast timer armed before any RTT sample")
				d.send(winPSN+1, winPSN+10)
				d.at(10_000).ack(winPSN + 10)
				d.expect(d.w.canSend(winPSN+10+137, d.now), "PSN 138 of a 138 window refused")
				d.expect(!d.w.canSend(winPSN+10+138, d.now), "PSN 139 of a 138 window allowed")
			},
			want: winSnap{Una: 1010, Max: 1010, Cwnd: 138, Ssthresh: winLimit, SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000},
		},
		{
			name: "ACK of part of the flight: the timers restart from it",
			run:  partialAck,
			want: winSnap{Una: 1015, Max: 1020, Cwnd: 143, Ssthresh: winLimit, SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000,
				Deadline: 30_000 + winTO, FastDeadline: 70_000},
		},
		{
			name: "duplicate ACK: no progress, nothing changes",
			run: func(d *winDriver) {
				partialAck(d)
				d.at(50_000)
				d.expect(!d.ack(1015), "a repeated ACK advanced the window")
				d.expect(!d.ack(1012), "an older ACK advanced the window")
			},
			want: winSnap{Una: 1015, Max: 1020, Cwnd: 143, Ssthresh: winLimit, SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000,
				Deadline: 30_000 + winTO, FastDeadline: 70_000},
		},
		{
			name: "NAK sequence error: halve once per episode, sample the first resent AckReq packet",
			run: func(d *winDriver) {
				warm(d)
				d.at(20_000).send(1010, 1110)
				d.at(30_000).nak(1050) // acknowledges 40 (window 178), then halves to 89
				d.expect(d.send(1050, 1052) == 1052, "resend refused")
				d.expect(d.w.sampling && d.w.sampPSN == 1051, "sampling %v at %d, want the resent AckReq packet 1051",
					d.w.sampling, d.w.sampPSN)
				d.at(31_000).nak(1050) // the same episode: no second halving
			},
			want: winSnap{Una: 1050, Max: 1110, Cwnd: 89, Ssthresh: 89, Recovering: true, RecoverPSN: 1110,
				SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000, Deadline: 30_000 + winTO, Resent: 2},
		},
		{
			name:  "NAK with a fixed window: no change",
			fixed: true,
			run: func(d *winDriver) {
				warm(d)
				d.at(20_000).send(1010, 1110)
				d.at(30_000).nak(1050)
			},
			want: winSnap{Una: 1050, Max: 1110, Cwnd: winLimit, Ssthresh: winLimit,
				SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000, Deadline: 30_000 + winTO},
		},
		{
			name: "timeout: the fast timer backs off 40, 80, 160 µs, then only the local ACK timer; it restarts from the floor",
			run: func(d *winDriver) {
				warm(d)
				d.at(100_000).send(1010, 1011)
				d.tick(139_999)
				d.expect(d.fast == 0, "fast retransmission before the rto")
				d.tick(140_000) // halves 138 → 69
				d.at(150_000).send(1010, 1011)
				d.expect(d.w.fastDeadline == 230_000, "fast deadline %d after one try, want 230000", d.w.fastDeadline)
				d.tick(230_000) // the same episode: no halving
				d.at(240_000).send(1010, 1011)
				d.expect(d.w.fastDeadline == 400_000, "fast deadline %d after two tries, want 400000", d.w.fastDeadline)
				d.tick(400_000)
				d.at(410_000).send(1010, 1011)
				d.expect(d.w.fastDeadline == 0, "fast timer armed after %d tries", d.w.fastTries)
				d.tick(100_000 + winTO) // the local ACK timer, armed by the first send
			},
			want: winSnap{Una: 1010, Max: 1011, Cwnd: 32, Ssthresh: 69, Recovering: true, RecoverPSN: 1011,
				SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000, Deadline: 100_000 + 2*winTO, FastTries: 3,
				Fast: 3, Timeouts: 1, Resent: 3},
		},
		{
			name: "spurious retransmission: the original's ACK comes before the resend reached it; undo",
			run: func(d *winDriver) {
				warm(d)
				d.at(20_000).send(1010, 1110) // AckReq on 1109, overdue at 60 µs
				d.tick(60_000)                // halves 138 → 69
				d.expect(d.w.undo && d.w.cwnd == 69, "undo %v cwnd %d after the fast retransmission", d.w.undo, d.w.cwnd)
				d.expect(d.send(1010, 1110) == 1079, "the halved window let the resend past 1078")
				d.at(70_000).ack(1110) // answers 1109 as first sent (50 µs round trip)
			},
			// The late round trip is sampled: srtt (7·10+50)/8 = 15 µs,
			// rttvar (3·5+40)/4 = 13.75 µs (above 50/4).
			want: winSnap{Una: 1110, Max: 1110, Cwnd: 138, Ssthresh: winLimit, SRTT: 15_000, RTTVar: 13_750, MinRTT: 10_000,
				Fast: 1, Spurious: 1, Resent: 69},
		},
		{
			name: "not spurious: the resend reached the overdue packet and its ACK took a round trip; the window stays halved",
			run: func(d *winDriver) {
				warm(d)
				d.at(20_000).send(1010, 1020)
				d.tick(60_000)
				d.send(1010, 1020)
				d.at(75_000).ack(1020)
			},
			want: winSnap{Una: 1020, Max: 1020, Cwnd: 69, Ssthresh: 69, RecoverPSN: 1020,
				SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000, Fast: 1, Resent: 10},
		},
		{
			name: "RNR: no sending and no timers during the wait, then the timer restarts with the resend",
			run: func(d *winDriver) {
				warm(d)
				d.at(20_000).send(1010, 1020)
				d.at(30_000)
				d.w.rnr(d.now, rnrTimerNs[1]) // 10 µs
				d.w.resend(1010)
				d.expect(d.w.wake() == 40_000, "wake %d, want the end of the wait 40000", d.w.wake())
				d.expect(d.w.rnrPending(), "no RNR wait pending")
				d.expect(!d.w.canSend(1010, 39_999), "sent during the RNR wait")
				d.tick(39_999)
				d.at(40_000).send(1010, 1020)
				d.tick(60_000) // the fast deadline set before the NAK is gone
			},
			want: winSnap{Una: 1010, Max: 1020, Cwnd: 138, Ssthresh: winLimit, SRTT: 10_000, RTTVar: 5_000, MinRTT: 10_000,
				Deadline: 40_000 + winTO, FastDeadline: 80_000, Resent: 10},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &winDriver{t: t}
			d.w.start(winPSN, winLimit, tc.fixed)
			d.w.setTimeout(timeoutNs(14))
			tc.run(d)
			if diff := cmp.Diff(tc.want, d.snap()); diff != "" {
				t.Errorf("window (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSendWindowAckReq: how often the requester asks for an ACK at a
// given window: every 64th packet at 128 PSNs and more (the golden
// captures' spacing), every 4th at 32, every 2nd at the smallest windows,
// and always on the packet that fills the window; with selective repeat
// every half window from 256 PSNs up, at most every 1024th.
func TestSendWindowAckReq(t *testing.T) {
	tests := []struct {
		cwnd       uint32
		psn, since uint32
		want, sr   bool
	}{
		{128, 1010, 63, false, false},
		{128, 1010, 64, true, false},
		{1024, 1010, 63, false, false},
		{32, 1010, 3, false, false},
		{32, 1010, 4, true, false},
		{12, 1010, 1, false, false},
		{12, 1010, 2, true, false},
		{128, 1000 + 126, 1, false, false},
		{128, 1000 + 127, 1, true, false}, // fills the window
		{1024, 1010, 64, false, true},
		{1024, 1010, 511, false, true},
		{1024, 1010, 512, true, true},
		{2048, 1010, 1023, false, true},
		{2048, 1010, 1024, true, true},
		{4096, 1010, 1024, true, true}, // at most every 1024th
		{512, 1010, 255, false, true},
		{512, 1010, 256, true, true},
		{128, 1010, 64, true, true}, // as without
		{32, 1010, 4, true, true},
		{1024, 1000 + 1023, 1, true, true},
	}
	for _, tc := range tests {
		w := sendWindow{una: 1000, cwnd: tc.cwnd}
		w.sr.on = tc.sr
		if got := w.wantAckReq(tc.psn, tc.since); got != tc.want {
			t.Errorf("sr %v cwnd %d psn %d, %d since the last AckReq: AckReq %v, want %v", tc.sr, tc.cwnd, tc.psn, tc.since, got, tc.want)
		}
	}
}

// TestSendWindowAttr: Attr.SendWindow caps the unacknowledged PSNs below
// Config.SendWindow (ConnectOptions.BDP sets it): 256 KiB WRITEs over the
// timed network with a round trip of ~30 packets keep at most the cap in
// flight, with selective repeat and with go-back-N, where the uncapped
// window (256) keeps more; the bytes land either way.
func TestSendWindowAttr(t *testing.T) {
	cfg := netCfg{delay: 48_000, perFrame: 4000, tick: 2000}
	for _, sr := range []bool{false, true} {
		var most [2]uint32
		for i, cap := range []uint32{0, 24} {
			o := defaultOpts()
			o.mtu, o.window, o.maxWR, o.sr, o.sendWindow = wire.MTU1024, 256, 64, sr, cap
			srStreamWith(t, o, 16, WRRDMAWrite, 4<<20, cfg, 1, func(to *netEnd, p *wire.Packet) bool {
				if to.q.win.anySent { // A, the requester: an ACK or SACK arrives
					most[i] = max(most[i], uint32(wire.PSNDiff(to.q.win.max, to.q.win.unacked())))
				}
				return false
			})
		}
		t.Logf("sr %v: most PSNs in flight uncapped %d, capped at 24 %d", sr, most[0], most[1])
		if most[1] > 24 || most[0] <= 24 {
			t.Errorf("sr %v: most PSNs in flight %d with Attr.SendWindow 24, %d without", sr, most[1], most[0])
		}
	}
}

// TestSendWindowDefault: a queue pair created without a SendWindow opens
// its window up to DefaultSendWindow with go-back-N and up to
// DefaultSRSendWindow when the peer agreed on selective repeat and DCQCN
// (selective repeat alone keeps DefaultSendWindow); a SendWindow given
// stays the limit either way.
func TestSendWindowDefault(t *testing.T) {
	for _, tc := range []struct {
		window    int
		sr, dcqcn bool
		want      uint32
	}{
		{0, false, false, DefaultSendWindow},
		{0, false, true, DefaultSendWindow},
		{0, true, true, DefaultSRSendWindow},
		{0, true, false, DefaultSendWindow}, // nothing cuts the window on congestion
		{1024, true, true, 1024},
		{512, false, false, 512},
	} {
		o := defaultOpts()
		o.window, o.sr, o.dcqcn = tc.window, tc.sr, tc.dcqcn
		if tc.sr {
			o.srWindow = SRHold
		}
		r := newNetRun(t, o, netCfg{delay: 10_000, perFrame: 1000, tick: 2000}, 1)
		r.step() // the engine applies the transitions to RTS
		if got := r.a.q.win.limit; got != tc.want {
			t.Errorf("SendWindow %d, selective repeat %v, DCQCN %v: window limit %d, want %d", tc.window, tc.sr, tc.dcqcn, got, tc.want)
		}
	}
}
