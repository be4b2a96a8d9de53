package ooo_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// TestStatShowsOOOCounters: after OOO traffic with duplicates and delayed
// packets (the helper reissues past them) and a Write to contexts the
// target released, the transport's OOO counters are non-zero in what
// `xdproce stat` reads from each device's stat socket (device totals and
// the queue pair's own), and equal to roce.Stats.
func TestStatShowsOOOCounters(t *testing.T) {
	t.Setenv(stat.EnvDir, t.TempDir())
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	fill(src, 3)
	p := newLane(t, pipe.Config{Seed: 5, AtoB: pipe.Faults{Duplicate: 0.1, Delay: 0.05, DelayTime: 100 * time.Millisecond}}, src, dst, 8, 0)
	w := newWriter(t, ooo.Config{MaxPackets: 16, First: 20 * time.Millisecond, MaxTries: 64}, p.lane())
	if err := w.Write(withTimeout(t, 30*time.Second), 0, 0, len(src), roce.NotifyInitiator); err != nil {
		t.Fatalf("%v (stats %+v)", err, w.Stats())
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("bytes differ")
	}
	time.Sleep(150 * time.Millisecond) // the delayed packets of the attempts given up arrive: stale_tid
	// Contexts the target no longer holds: its packets are stale_ctx.
	if err := p.b.qp.ReleaseContexts(p.ctxs); err != nil {
		t.Fatal(err)
	}
	w2 := newWriter(t, ooo.Config{Timeout: 5 * time.Millisecond, First: 5 * time.Millisecond, MaxTries: 2}, p.lane())
	if err := w2.Write(withTimeout(t, 10*time.Second), 0, 0, 4096, roce.NotifyInitiator); !errors.Is(err, ooo.ErrTooManyTries) {
		t.Fatalf("Write to released contexts: %v, want ErrTooManyTries", err)
	}

	for _, c := range []struct {
		side  string
		e     end
		names []string
	}{
		{"target", p.b, []string{"ooo_completions_sent", "dup_index", "stale_tid", "stale_ctx"}},
		{"initiator", p.a, []string{"ooo_completions_received"}},
	} {
		s, err := stat.Listen(c.e.dev, "pipe-"+c.side, "test")
		if err != nil {
			t.Fatal(err)
		}
		r, err := stat.Query(s.Path(), true, 2*time.Second)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		var qp *roce.QPSnapshot
		for i := range r.PerQP {
			if r.PerQP[i].QPN == c.e.qp.QPN() {
				qp = &r.PerQP[i]
			}
		}
		if qp == nil || qp.Type != "OOO" {
			t.Fatalf("%s: stat lists no OOO queue pair 0x%x: %+v", c.side, c.e.qp.QPN(), r.PerQP)
		}
		want := c.e.dev.Stats().OOO
		fields := map[string]uint64{"ooo_completions_sent": want.CompletionsSent, "ooo_completions_received": want.CompletionsReceived,
			"dup_index": want.DupIndex, "stale_tid": want.StaleTID, "stale_ctx": want.StaleCtx}
		for _, name := range c.names {
			dev, ok1 := r.Counters.Get(name)
			own, ok2 := qp.Counters.Get(name)
			t.Logf("%s: %s %d (queue pair %d, roce.Stats %d)", c.side, name, dev, own, fields[name])
			if !ok1 || !ok2 || dev == 0 || own != dev || dev != fields[name] {
				t.Errorf("%s: stat shows %s = %d (%v), queue pair %d (%v); roce.Stats %d; want them equal and non-zero",
					c.side, name, dev, ok1, own, ok2, fields[name])
			}
		}
	}
}
