package roce_test

import (
	"context"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// The data-path benchmarks post work requests on an RC connection between two
// devices over link/pipe and poll their completions, keeping depth requests
// outstanding. They report MB/s (through SetBytes) and msgs/s.

func BenchmarkDataPathSend64(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		b.Run("mtu="+itoa(mtu), func(b *testing.B) { benchDataPath(b, qp.WRSend, 64, 32, mtu) })
	}
}

func BenchmarkDataPathWrite64K(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		b.Run("mtu="+itoa(mtu), func(b *testing.B) { benchDataPath(b, qp.WRRDMAWrite, 64<<10, 8, mtu) })
	}
}

func BenchmarkDataPathRead64K(b *testing.B) {
	for _, mtu := range []int{1500, 9000} {
		b.Run("mtu="+itoa(mtu), func(b *testing.B) { benchDataPath(b, qp.WRRDMARead, 64<<10, 8, mtu) })
	}
}

func benchDataPath(b *testing.B, op qp.WROpcode, size, depth, mtu int) {
	p, _, _ := newPipeDevices(b, pipe.Config{MTU: mtu, Depth: 4096, TxBuffers: 1024})
	benchOps(b, p, op, size, depth)
}

// benchOps posts b.N work requests of one kind on an RC connection between
// p.a and p.b, keeping depth outstanding, and reports msgs/s and Gb/s.
func benchOps(b *testing.B, p *devPair, op qp.WROpcode, size, depth int) {
	const nRecv = 128
	o := roce.DefaultConnectOptions() // timeout 14 (67 ms): a 1 ms timeout fires spuriously with 1 MiB in flight
	x, y := connectRC(b, p, connCfg{bufSize: 2 << 20, maxWR: 256, cqDepth: 1024, opts: &o})
	fill(x.buf, 1)
	fill(y.buf, 2)
	// One deadline for the whole run (a per-wait context would allocate): a
	// hang fails with the devices' counters instead of blocking forever.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wr := roce.SendWR{Opcode: op, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, size)}}
	if op == qp.WRRDMAWrite || op == qp.WRRDMARead {
		wr.RemoteAddr, wr.RKey = y.mr.Addr()+1<<20, y.mr.RKey()
	}
	recvSGL := make([][]roce.SGE, nRecv)
	for i := range recvSGL {
		recvSGL[i] = []roce.SGE{y.sge(i*4096, 4096)}
	}
	if op == qp.WRSend {
		for i := 0; i < nRecv; i++ {
			if err := y.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: recvSGL[i]}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var wcs, rwcs [64]roce.WC
	outstanding := 0
	reap := func(block bool) {
		var n int
		var err error
		if block {
			n, err = x.scq.Wait(ctx, wcs[:])
			if err != nil {
				b.Fatalf("waiting for completions: %v\na: %+v\nb: %+v", err, p.a.Stats(), p.b.Stats())
			}
		} else {
			n, err = x.scq.Poll(wcs[:])
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != qp.WCSuccess {
				b.Fatalf("completion %+v (%v)\na: %+v\nb: %+v", wc, wc.Status, p.a.Stats(), p.b.Stats())
			}
		}
		outstanding -= n
		if op == qp.WRSend {
			m, err := y.rcq.Poll(rwcs[:])
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range rwcs[:m] {
				if wc.Status != qp.WCSuccess {
					b.Fatalf("receive completion %+v (%v)", wc, wc.Status)
				}
				if err := y.qp.PostRecv(roce.RecvWR{ID: wc.ID, SGL: recvSGL[wc.ID]}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for outstanding >= depth {
			reap(true)
		}
		wr.ID = uint64(i)
		if err := x.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		outstanding++
		if outstanding > depth/2 {
			reap(false)
		}
	}
	for outstanding > 0 {
		reap(true)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)*float64(size)*8/el.Seconds()/1e9, "Gb/s")
	reportRetx(b, p.a.Stats())
	reportRounds(b, p.a.Stats(), p.b.Stats())
}

// reportRounds reports how many engine rounds each side ran per data frame
// (rounds that find nothing to do cost as much as busy ones) and how many
// wakeups of a sleeping engine its doorbells made.
func reportRounds(b *testing.B, sa, sb roce.Stats) {
	if sa.TxFrames > 0 && sb.RxFrames > 0 {
		b.ReportMetric(float64(sa.Rounds)/float64(sa.TxFrames), "tx-rounds/frame")
		b.ReportMetric(float64(sb.Rounds)/float64(sb.RxFrames), "rx-rounds/frame")
		b.ReportMetric(float64(sa.Wakeups)/float64(sa.TxFrames), "doorbell-wakeups/frame")
		b.ReportMetric(float64(sb.Naps)/float64(sb.RxFrames), "rx-naps/frame")
	}
}

// reportRetx reports the share of frames sent again and, as counts for the
// whole run, the local ACK timeouts and fast retransmits (and how many of
// those an ACK proved spurious) behind them: with
// nothing lost on the way all three should be 0, and each timeout idles the
// connection for a whole ACK timeout.
func reportRetx(b *testing.B, s roce.Stats) {
	if s.TxFrames > 0 {
		b.ReportMetric(float64(s.Retransmits)/float64(s.TxFrames)*100, "%retx")
	}
	b.ReportMetric(float64(s.Timeouts), "timeouts")
	b.ReportMetric(float64(s.FastRetransmits), "fast-retx")
	b.ReportMetric(float64(s.SpuriousFastRetransmits), "spurious-retx")
}
