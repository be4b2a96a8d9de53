package roce

import (
	"errors"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/xsk"
)

// xdpCounters reads the steering program's verdict counters for Snapshot:
// frames redirected to the AF_XDP sockets, frames passed to the kernel
// stack, then each reason for passing; then, when l is an AF_XDP link (one
// socket or several queues), its sockets' statistics summed (xskCounters).
// On an error it returns what it could read with it.
func xdpCounters(p *bpf.Program, l link.Link) func() (Counters, error) {
	socks, _ := l.(xskStatser)
	return func() (Counters, error) {
		cs := make(Counters, 0, 2+int(bpf.NumVerdicts)-1+len(xskNames))
		c, perr := p.Counters()
		if perr == nil {
			cs = append(cs, Counter{"xdp_redirected", c[bpf.Redirected].Packets}, Counter{"xdp_passed", c.Passed()})
			for v := bpf.NoSocket; v < bpf.NumVerdicts; v++ {
				cs = append(cs, Counter{"xdp_passed_" + xdpReason[v], c[v].Packets})
			}
		}
		if socks == nil {
			return cs, perr
		}
		st, serr := socks.Stats()
		if serr == nil {
			cs = append(cs, xskCounters(&st)...)
		}
		return cs, errors.Join(perr, serr) // what could be read, and why not the rest
	}
}

// xdpReason names the verdicts that pass a frame, as counter suffixes.
var xdpReason = [bpf.NumVerdicts]string{bpf.NoSocket: "no_socket", bpf.NotIP: "not_ip", bpf.NotRoCE: "not_roce",
	bpf.NotLocal: "not_local", bpf.Truncated: "truncated", bpf.Fragment: "fragment"}

// An xskStatser is an AF_XDP link: xsk.Socket, or xsk.MultiQueue (its
// sockets summed).
type xskStatser interface {
	Stats() (xsk.Stats, error)
}

// xskNames are the AF_XDP sockets' counters in Snapshot.XDP, in order: the
// kernel's XDP_STATISTICS, then link/xsk's own.
var xskNames = [...]string{"xsk_rx_dropped", "xsk_rx_invalid_descs", "xsk_tx_invalid_descs", "xsk_rx_ring_full",
	"xsk_rx_fill_ring_empty", "xsk_tx_ring_empty", "xsk_rx_too_long", "xsk_rx_joined", "xsk_rx_copied", "xsk_tx_retry_waits"}

func xskCounters(st *xsk.Stats) Counters {
	v := [len(xskNames)]uint64{st.Rx_dropped, st.Rx_invalid_descs, st.Tx_invalid_descs, st.Rx_ring_full,
		st.Rx_fill_ring_empty_descs, st.Tx_ring_empty_descs, st.RxTooLong, st.RxJoined, st.RxCopied, st.TxRetryWaits}
	cs := make(Counters, len(xskNames))
	for i, n := range xskNames {
		cs[i] = Counter{n, v[i]}
	}
	return cs
}
