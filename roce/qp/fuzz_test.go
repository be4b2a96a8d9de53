package qp

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// FuzzReceive feeds arbitrary frames (seeded with rxe's) to a live QP that
// is both responder and requester with WRs outstanding. It must not panic,
// must not touch memory without remote access, and must not write into a
// region that only grants REMOTE_READ.
func FuzzReceive(f *testing.F) {
	for _, name := range []string{"rc_pingpong.pcap", "verbs_ops.pcap", "verbs_ops_multipkt.pcap", "read_bw.pcap",
		"atomic_bw_faa.pcap", "nak_access_err.pcap", "rnr_nak.pcap", "write_bw.pcap"} {
		for _, dir := range []string{"../../testdata/rxe", "/work/shared/pcaps/rxe"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				for _, c := range readCaptureFile(f, filepath.Join(dir, name)) {
					f.Add(c)
				}
				break
			}
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		o := defaultOpts()
		o.maxWR = 8
		p := newPair(t, o)
		v := p.b
		rw, _ := v.reg(t, 4096, allAcc)
		roBuf, local := guardRegions(t, v.pd)
		land, _ := v.reg(t, 4096, mr.LocalWrite)
		must(t, v.q.PostRecv(&RecvWR{ID: 1, SGL: []mr.SGE{sge(rw, 0, 2048)}}))
		must(t, v.q.PostSend(&SendWR{ID: 2, Opcode: WRRDMARead, SGL: []mr.SGE{sge(land, 0, 3000)}, RemoteAddr: 0x1000, RKey: 5}))
		must(t, v.q.PostSend(&SendWR{ID: 3, Opcode: WRAtomicFetchAdd, SGL: []mr.SGE{sge(land, 3000, 8)}, RemoteAddr: 0x2000, RKey: 5}))
		must(t, v.q.PostSend(&SendWR{ID: 4, Opcode: WRSend, SGL: []mr.SGE{sge(land, 0, 3000)}}))
		v.q.Progress(1, v.out) // the requests go out (and are dropped)
		v.out.committed = v.out.committed[:0]
		v.out.free = len(v.out.pool)
		roBefore := bytes.Clone(roBuf)

		var pk wire.Packet
		err := pk.Decode(frame)
		if err != nil && !errors.Is(err, wire.ErrBadICRC) && !errors.Is(err, wire.ErrBadChecksum) {
			return
		}
		// Aim it at the QP; try the PSNs that matter.
		pk.BTH.DestQPN = v.q.QPN()
		for _, psn := range []uint32{pk.BTH.PSN, 0x1000, 0x2000, 0x2001, 0x2002} {
			pk.BTH.PSN = psn
			v.q.Receive(&pk, 2, v.out)
			v.q.Progress(3, v.out)
			v.out.committed = v.out.committed[:0]
			v.out.free = len(v.out.pool)
		}
		v.q.Progress(1<<40, v.out) // fire every timer
		if !bytes.Equal(roBuf, roBefore) {
			t.Fatal("a REMOTE_READ-only region was written")
		}
		if !bytes.Equal(local, make([]byte, 4096)) {
			t.Fatal("a local-only region was written")
		}
	})
}

// guardRegions registers a REMOTE_READ-only region and a local-only one in
// pd (4 KiB each, zeroed): a fuzzed frame must leave both as they are.
func guardRegions(t *testing.T, pd *mr.PD) (roBuf, local []byte) {
	roBuf, local = make([]byte, 4096), make([]byte, 4096)
	_, err := pd.Register(roBuf, mr.RemoteRead|mr.LocalWrite)
	must(t, err)
	_, err = pd.Register(local, 0)
	must(t, err)
	return roBuf, local
}
