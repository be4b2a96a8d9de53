package cli

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/toolpeer"
	"github.com/xdproce/xdproce/roce"
)

// calibIters is the length of -D's first run.
const calibIters = 100

// calibEnough is how long a run must last for its rate to stand for the
// next one's (the first messages of a run also pay for address resolution
// and warm-up): shorter runs are followed by one ten times as long.
const calibEnough = 200 * time.Millisecond

// timedRuns runs -D after the agreement on the first connection: runs of
// calibIters messages, then ten times as many each while one lasts less
// than calibEnough, then as many as fill the rest of the duration at the
// last run's rate (several runs when the receive queue bounds them). The
// client decides; before each run the two ends agree again on connections
// of its own (the server takes the client's iterations, and
// cm.BenchParams.Calibrate says whether more runs follow). The result is
// all the runs together: their messages over the sum of their data phases.
func (b *bench) timedRuns(ctx context.Context, first net.Conn, next func() (net.Conn, error), client bool) ([]benchResult, error) {
	limit := math.MaxInt32
	if b.test == cm.SendBW || b.test == cm.SendLat {
		limit = roce.MaxWR // every receive is posted up front
	}
	b.iters, b.calibrate = calibIters, true
	var rounds []timedRound
	conn := first
	for {
		rs, err := b.runOn(ctx, []net.Conn{conn}, next, client)
		if err != nil {
			return nil, fmt.Errorf("-D: run %d (%d messages): %w", len(rounds)+1, b.iters, err)
		}
		rounds = append(rounds, timedRound{iters: b.iters, took: roundTime(rs, client), rs: rs})
		if !b.calibrate {
			break
		}
		if client {
			b.nextTimed(rounds, limit)
		}
		if conn, err = next(); err != nil {
			return nil, err
		}
		_, agreed, err := b.firstBounded(ctx, conn, client)
		if err == nil && !agreed {
			err = fmt.Errorf("-D: the peer did not agree on the next run")
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
	}
	return []benchResult{b.summariseTimed(client, rounds)}, nil
}

// timedRound is one run of -D.
type timedRound struct {
	iters int
	took  time.Duration
	rs    []toolpeer.PerftestResult
}

// roundTime is how long a run's data phase took: the client's own time, or
// on the server the client's as its reports give it (WRITE, READ and
// atomics leave the server idle), else the server's own.
func roundTime(rs []toolpeer.PerftestResult, client bool) time.Duration {
	var took time.Duration
	for _, r := range rs {
		t := r.Elapsed
		if rep := r.PeerReport; !client && rep.MsgRate > 0 {
			t = time.Duration(float64(rep.Iters) / (rep.MsgRate * 1e6) * float64(time.Second))
		}
		took = max(took, t)
	}
	return took
}

// nextTimed sets the client's next run from the runs so far: ten times the
// last while it was shorter than calibEnough, else the messages that fill
// the rest of the duration at its rate, at most limit (then more follow).
func (b *bench) nextTimed(rounds []timedRound, limit int) {
	var spent time.Duration
	for _, r := range rounds {
		spent += r.took
	}
	last := rounds[len(rounds)-1]
	rate := float64(last.iters) / max(last.took.Seconds(), 1e-6)
	need := max(rate*(float64(b.seconds)-spent.Seconds()), 1)
	n := need
	if last.took < calibEnough {
		n = min(10*float64(last.iters), need)
	}
	b.iters = int(min(n, float64(limit)))
	b.calibrate = float64(b.iters) < need
	if !slices.Contains(b.set, "iters") {
		b.set = append(b.set, "iters")
	}
}

// summariseTimed is -D's result: every run's messages over the sum of the
// runs' data phases.
func (b *bench) summariseTimed(client bool, rounds []timedRound) benchResult {
	var all []toolpeer.PerftestResult
	var iters int
	var took time.Duration
	for _, r := range rounds {
		all = append(all, r.rs...)
		iters += r.iters
		took += r.took
	}
	res := b.summarise(map[bool]string{true: "client", false: "server"}[client], all, false)
	res.QPs, res.Iters, res.Seconds = b.qps, iters, took.Seconds()
	if took > 0 {
		msgs := float64(iters) * float64(b.qps)
		res.BW = msgs * float64(b.size) * 8 / took.Seconds() / 1e9
		res.Rate = msgs / took.Seconds() / 1e6
	}
	if client {
		fmt.Fprintf(b.env.Stderr, "bench %s: -D %d: %d runs of %d messages in all took %v\n", b.name, b.seconds, len(rounds), iters, took.Round(time.Millisecond))
	}
	return res
}
