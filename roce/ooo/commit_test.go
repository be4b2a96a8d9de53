package ooo_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/ooo"
)

// TestWriteCommit: through a pipe that loses 5 % of the frames each way
// (and reorders and duplicates), the commit record of WriteCommit (even
// seeds) or of a StreamCommit of two ranges (odd seeds) reaches the
// target only once the whole range is there: at the target's completion of
// the commit context, the range is already byte-exact. Lost operations
// flush commits that were waiting for them, and a fresh commit follows the
// reissues.
func TestWriteCommit(t *testing.T) {
	const n, rec = 200_000, 64
	var flushes, rounds uint64
	for seed := range uint64(6) {
		src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
		fill(src, byte(seed))
		f := pipe.Faults{Loss: 0.05, Reorder: 0.3, Duplicate: 0.02}
		p := newLane(t, pipe.Config{Seed: seed + 1, AtoB: f, BtoA: f}, src, dst, 9, 0)
		lane := p.lane()
		commit := ooo.Commit{Local: 900_000, Remote: 900_000, Len: rec, Ctx: p.ctxs[8]}
		lane.Remote.Ctxs = p.ctxs[:8]
		w := newWriter(t, ooo.Config{MaxPackets: 8, Timeout: 20 * time.Millisecond}, lane)
		seen := make(chan bool, 1)
		go func() {
			var wcs [8]roce.WC
			for {
				k, err := p.b.rcq.Wait(withTimeout(t, 20*time.Second), wcs[:])
				if err != nil {
					seen <- false
					return
				}
				for _, wc := range wcs[:k] {
					if wc.Opcode == roce.WCOOOTarget && wc.Ctx == commit.Ctx && wc.Status == roce.WCSuccess {
						// The data only: a commit reissued because its
						// delivered completion was late may write the
						// record again (the same bytes) while this reads.
						seen <- bytes.Equal(dst[:n], src[:n])
						return
					}
				}
			}
		}()
		if seed%2 == 0 {
			if err := w.WriteCommit(withTimeout(t, 20*time.Second), 0, 0, n, commit); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		} else { // the same bytes as a stream of two ranges
			var got []int
			st, err := w.StreamCommit(withTimeout(t, 20*time.Second), func(_, _ uint64, k int) error {
				got = append(got, k)
				return nil
			}, commit)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Add(0, 0, n/2); err != nil {
				t.Fatal(err)
			}
			if err := st.Add(n/2, n/2, n-n/2); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if len(got) != 2 {
				t.Fatalf("seed %d: ranges delivered %v", seed, got)
			}
		}
		if ok := <-seen; !ok {
			t.Fatalf("seed %d: the commit reached the target before the range was whole", seed)
		}
		st := w.Stats()
		if st.CommitsPosted < st.CommitFlushes+1 {
			t.Errorf("seed %d: %+v", seed, st)
		}
		if st.CommitRetries == 0 && !bytes.Equal(dst[900_000:900_000+rec], src[900_000:900_000+rec]) {
			t.Errorf("seed %d: the commit record did not land", seed)
		}
		flushes += st.CommitFlushes
		rounds += st.CommitsPosted
		t.Logf("seed %d: %+v", seed, st)
	}
	if flushes == 0 {
		t.Errorf("at 5 %% loss no commit was flushed in 6 runs (%d posted)", rounds)
	}
}

// TestWriteCommitLanes: a commit needs one lane.
func TestWriteCommitLanes(t *testing.T) {
	src, dst := make([]byte, 1<<16), make([]byte, 1<<16)
	p := newLane(t, pipe.Config{}, src, dst, 2, 0)
	q := newLane(t, pipe.Config{}, src, dst, 2, 1)
	w := newWriter(t, ooo.Config{}, p.lane(), q.lane())
	if err := w.WriteCommit(withTimeout(t, time.Second), 0, 0, 10, ooo.Commit{Len: 8, Ctx: p.ctxs[1]}); err == nil {
		t.Fatal("a commit over two lanes was accepted")
	}
}

// TestWriteCommitCancel: a WriteCommit whose range cannot be delivered (the
// target's rkey is wrong: no completion ever comes) ends with the context's
// error, and its commit, left waiting, flushes: a Write after it goes
// through.
func TestWriteCommitCancel(t *testing.T) {
	src, dst := make([]byte, 1<<16), make([]byte, 1<<16)
	fill(src, 3)
	p := newLane(t, pipe.Config{}, src, dst, 3, 0)
	lane := p.lane()
	lane.Remote.Ctxs = p.ctxs[:2]
	good := lane.Remote.RKey
	lane.Remote.RKey ^= 0x100
	w := newWriter(t, ooo.Config{Timeout: time.Second, MaxTimeout: time.Second}, lane)
	err := w.WriteCommit(withTimeout(t, 300*time.Millisecond), 0, 0, 5000, ooo.Commit{Local: 60000, Remote: 60000, Len: 8, Ctx: p.ctxs[2]})
	if err == nil {
		t.Fatal("a WriteCommit to a wrong rkey succeeded")
	}
	if st := w.Stats(); st.CommitsPosted != 1 {
		t.Fatalf("%+v: want the commit posted once", st)
	}
	w.Close()
	lane.Remote.RKey = good
	lane.Remote.Ctxs = p.ctxs[:2]
	w2 := newWriter(t, ooo.Config{Timeout: time.Second}, lane)
	if err := w2.Write(withTimeout(t, 5*time.Second), 0, 0, 5000, roce.NotifyInitiator); err != nil {
		t.Fatalf("a Write behind the abandoned commit: %v", err)
	}
	if !bytes.Equal(dst[:5000], src[:5000]) {
		t.Fatal("written bytes differ")
	}
}
