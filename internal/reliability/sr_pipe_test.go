package reliability

import (
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestTrafficLossyPipeSR: the traffic generator (WRITE, READ, FETCH_ADD,
// SEND on 8 connections, byte-exact, atomics once) over link/pipe with 5 %
// loss, 2 % reorder, 1 % duplication and 0.1 % corruption both ways, with
// selective repeat and with go-back-N on the same seed: both complete;
// selective repeat held packets, SACKed, resent selectively, sent no PSN
// sequence NAK, and resent fewer packets in all than go-back-N.
func TestTrafficLossyPipeSR(t *testing.T) {
	total := int64(16 << 20)
	if testing.Short() {
		total = 4 << 20
	}
	f := pipe.Faults{Loss: 0.05, Reorder: 0.02, Duplicate: 0.01, Corrupt: 0.001}
	var retrans [2]uint64
	for i, rel := range []roce.Reliability{roce.GoBackN, roce.SelectiveRepeat} {
		o := roce.DefaultConnectOptions()
		// Timeout 12 (16.8 ms): eight in a row outlast an engine goroutine
		// starved on a loaded 2-core machine (at 10, 34 ms did not: about
		// one run in 300 ended with every connection's RETRY_EXC_ERR at
		// once, frames delivered to the receiver that it had not read).
		o.Timeout, o.MinRNRTimer, o.Reliability = 12, 1, rel
		if raceEnabled {
			o.Timeout = 15
		}
		a, b, la, _ := newPipePair(t, pipe.Config{Seed: 9, AtoB: f, BtoA: f, TxBuffers: 1024})
		res := runTraffic(t, a, b, trafficConfig{conns: 8, total: total, opts: o, window: 256})
		sa, sb := a.Stats(), b.Stats()
		retrans[i] = sa.Retransmits + sb.Retransmits
		t.Logf("%v: %v; pipe a→b %+v; retransmits %d (selective %d), timeouts %d, seq NAKs %d; SR a %+v b %+v",
			rel, res, la.Stats(), retrans[i], sa.SR.SelectiveRetransmits+sb.SR.SelectiveRetransmits,
			sa.Timeouts+sb.Timeouts, sa.SeqNAKs+sb.SeqNAKs, sa.SR, sb.SR)
		if rel == roce.SelectiveRepeat {
			if sa.SeqNAKs+sb.SeqNAKs != 0 {
				t.Errorf("selective repeat: %d PSN sequence NAKs", sa.SeqNAKs+sb.SeqNAKs)
			}
			if sb.SR.OutOfSequencePlaced == 0 || sb.SR.SACKsSent == 0 || sa.SR.SACKsRecv == 0 || sa.SR.SelectiveRetransmits == 0 {
				t.Errorf("selective repeat did not happen: a %+v b %+v", sa.SR, sb.SR)
			}
		} else if sa.SR != (roce.SRStats{}) || sb.SR != (roce.SRStats{}) {
			t.Errorf("go-back-N counted selective repeat: a %+v b %+v", sa.SR, sb.SR)
		}
	}
	switch {
	case retrans[1] < retrans[0]:
	case raceEnabled:
		// Under the race detector, beside the other packages' -race
		// runs, local ACK timeouts fire that a normal build does not see
		// (a CI run: sr 8053 resends against gbn 7661, one timeout, when
		// READ responses were still go-back-N in both modes): the
		// comparison is the normal build's to make.
		t.Logf("selective repeat resent %d packets, go-back-N %d (not compared under -race)", retrans[1], retrans[0])
	default:
		t.Errorf("selective repeat resent %d packets, go-back-N %d", retrans[1], retrans[0])
	}
}
