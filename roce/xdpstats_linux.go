package roce

import "github.com/xdproce/xdproce/bpf"

// xdpCounters reads the steering program's verdict counters for Snapshot:
// frames redirected to the AF_XDP sockets, frames passed to the kernel
// stack, then each reason for passing.
func xdpCounters(p *bpf.Program) func() (Counters, error) {
	return func() (Counters, error) {
		c, err := p.Counters()
		if err != nil {
			return nil, err
		}
		cs := make(Counters, 0, 2+bpf.NumVerdicts-1)
		cs = append(cs, Counter{"xdp_redirected", c[bpf.Redirected].Packets}, Counter{"xdp_passed", c.Passed()})
		for v := bpf.NoSocket; v < bpf.NumVerdicts; v++ {
			cs = append(cs, Counter{"xdp_passed_" + xdpReason[v], c[v].Packets})
		}
		return cs, nil
	}
}

// xdpReason names the verdicts that pass a frame, as counter suffixes.
var xdpReason = [bpf.NumVerdicts]string{bpf.NoSocket: "no_socket", bpf.NotIP: "not_ip", bpf.NotRoCE: "not_roce",
	bpf.NotLocal: "not_local", bpf.Truncated: "truncated", bpf.Fragment: "fragment"}
