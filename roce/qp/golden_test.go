package qp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// capFrame is one RoCEv2 frame of a capture.
type capFrame struct {
	data []byte
	p    wire.Packet
}

// readCapture returns the RoCEv2 frames of an rxe capture (other frames,
// such as the TCP exchange of the tools, are skipped).
func readCapture(t *testing.T, name string) []capFrame {
	t.Helper()
	for _, dir := range []string{"../../testdata/rxe", "/work/shared/pcaps/rxe"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		var out []capFrame
		for _, data := range readCaptureFile(t, path) {
			c := capFrame{data: data}
			must(t, c.p.Decode(c.data))
			out = append(out, c)
		}
		return out
	}
	t.Skipf("capture %s not found", name)
	return nil
}

// readCaptureFile returns the frames of a pcap that decode as RoCEv2.
func readCaptureFile(tb testing.TB, path string) [][]byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	var p wire.Packet
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		if p.Decode(data) == nil {
			out = append(out, bytes.Clone(data))
		}
	}
	return out
}

// withIPID re-encodes frame with another IPv4 identification (which changes
// the IP checksum and the ICRC, nothing else).
func withIPID(t *testing.T, frame []byte, id uint16) []byte {
	t.Helper()
	var p wire.Packet
	if err := p.Decode(frame); err != nil {
		t.Fatal(err)
	}
	p.IPID = id
	p.Payload = bytes.Clone(p.Payload)
	out := make([]byte, p.FrameLen())
	if _, err := p.Encode(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// keySource hands out the given keys (lkey, rkey, lkey, rkey, ...) to
// mr.WithRand, so a test can register a region under an rkey from a capture.
// After them it counts up from 0x40000000.
type keySource struct {
	keys []uint32
	next uint32
}

func (k *keySource) Read(b []byte) (int, error) {
	if len(k.keys) == 0 {
		k.next++
		binary.LittleEndian.PutUint32(b, 0x40000000+k.next)
		return 4, nil
	}
	binary.LittleEndian.PutUint32(b, k.keys[0])
	k.keys = k.keys[1:]
	return 4, nil
}

// capEnd builds a QP with the addresses of a captured packet's source.
func capEnd(t *testing.T, typ Type, qpn uint32, keys []uint32) *end {
	t.Helper()
	o := defaultOpts()
	o.typ = typ
	e := &end{name: "cap", tbl: mr.NewTable(mr.WithRand(&keySource{keys: keys})), out: newTxOut(64)}
	e.pd = e.tbl.AllocPD()
	e.cq = NewCQ(256)
	q, err := New(Config{Type: typ, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, QPN: qpn})
	must(t, err)
	e.q = q
	return e
}

// rcConnect brings q to RTS with the addresses of frame p as seen from its
// sender (local = p.Src).
func rcConnect(t *testing.T, q *QP, p *wire.Packet, destQPN, sqPSN, rqPSN uint32, rnr uint8) {
	t.Helper()
	av := AddressVector{SrcMAC: p.SrcMAC, DstMAC: p.DstMAC, SrcIP: p.SrcIP, DstIP: p.DstIP}
	must(t, q.Modify(&Attr{State: Init, Access: allAcc}, AttrState|AttrAccessFlags))
	must(t, q.Modify(&Attr{State: RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: destQPN, RQPSN: rqPSN,
		MaxDestRdAtomic: 16, MinRNRTimer: rnr},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
	must(t, q.Modify(&Attr{State: RTS, SQPSN: sqPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxRdAtomic))
}

// TestGoldenRCPingpong builds the first SEND_ONLY and its ACK of rxe's
// ibv_rc_pingpong and compares them with the captured frames byte for byte.
// rxe numbers IPv4 IDs with a counter; we send 0 (ROCEV2.md), so the
// captured frame is compared both as captured (every byte but the ID, the
// IP checksum and the ICRC) and re-encoded with ID 0 (every byte).
func TestGoldenRCPingpong(t *testing.T) {
	frames := readCapture(t, "rc_pingpong.pcap")
	var send, ack *capFrame
	for i := range frames {
		f := &frames[i]
		if send == nil && f.p.BTH.Opcode == wire.RCSendOnly {
			send = f
		} else if send != nil && ack == nil && f.p.BTH.Opcode == wire.RCAck && f.p.BTH.PSN == send.p.BTH.PSN {
			ack = f
		}
	}
	if send == nil || ack == nil {
		t.Fatal("capture has no SEND_ONLY/ACK pair")
	}
	sp := &send.p
	// Requester: the client (sender of the SEND).
	cl := capEnd(t, RC, 0x11, nil)
	rcConnect(t, cl.q, sp, sp.BTH.DestQPN, sp.BTH.PSN, ack.p.BTH.PSN+0x1000, 0)
	m, err := cl.pd.Register(bytes.Clone(sp.Payload), 0)
	must(t, err)
	must(t, cl.q.PostSend(&SendWR{ID: 1, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(m, 0, len(sp.Payload))}}))
	cl.q.Progress(1, cl.out)
	if len(cl.out.committed) != 1 {
		t.Fatalf("requester sent %d frames, want 1", len(cl.out.committed))
	}
	compareGolden(t, "SEND_ONLY", cl.out.committed[0], send.data)

	// Responder: the server receives the captured SEND and acknowledges it.
	sv := capEnd(t, RC, 0x11, nil)
	var back wire.Packet
	must(t, back.Decode(ack.data))
	rcConnect(t, sv.q, &back, back.BTH.DestQPN, 0x0e1221, sp.BTH.PSN, 0)
	rb, err := sv.pd.Register(make([]byte, 4096), mr.LocalWrite)
	must(t, err)
	must(t, sv.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(rb, 0, 4096)}}))
	var in wire.Packet
	must(t, in.Decode(send.data))
	sv.q.Receive(&in, 1, sv.out)
	sv.q.Progress(1, sv.out)
	if len(sv.out.committed) != 1 {
		t.Fatalf("responder sent %d frames, want 1", len(sv.out.committed))
	}
	compareGolden(t, "ACKNOWLEDGE", sv.out.committed[0], ack.data)
	if !bytes.Equal(rb.Bytes()[:len(sp.Payload)], sp.Payload) {
		t.Error("received payload differs from the captured one")
	}
}

func compareGolden(t *testing.T, what string, got, captured []byte) {
	t.Helper()
	if len(got) != len(captured) {
		t.Fatalf("%s: %d bytes, captured %d", what, len(got), len(captured))
	}
	// As captured: all but the IPv4 ID (18..19), checksum (24..25) and ICRC.
	for i := range got {
		if (i >= 18 && i < 20) || (i >= 24 && i < 26) || i >= len(got)-4 {
			continue
		}
		if got[i] != captured[i] {
			t.Errorf("%s: byte %d = %#02x, captured %#02x", what, i, got[i], captured[i])
		}
	}
	if id := binary.BigEndian.Uint16(got[18:]); id != 0 {
		t.Errorf("%s: IPv4 ID %d, want 0", what, id)
	}
	// Re-encoded with our ID: every byte.
	want := withIPID(t, captured, 0)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: differs from the capture with IPv4 ID 0:\n got % x\nwant % x", what, got, want)
	}
}

// TestGoldenUDSend builds the first UD SEND_ONLY of ibv_ud_pingpong.
func TestGoldenUDSend(t *testing.T) {
	frames := readCapture(t, "ud_pingpong.pcap")
	var send *capFrame
	for i := range frames {
		if frames[i].p.BTH.Opcode == wire.UDSendOnly {
			send = &frames[i]
			break
		}
	}
	if send == nil {
		t.Fatal("no UD SEND_ONLY")
	}
	sp := &send.p
	e := capEnd(t, UD, sp.DETH.SrcQPN, nil)
	must(t, e.q.Modify(&Attr{State: Init, QKey: sp.DETH.QKey, PathMTU: wire.MTU1024}, AttrState|AttrQKey|AttrPathMTU))
	must(t, e.q.Modify(&Attr{State: RTR}, AttrState))
	must(t, e.q.Modify(&Attr{State: RTS, SQPSN: sp.BTH.PSN}, AttrState|AttrSQPSN))
	m, err := e.pd.Register(bytes.Clone(sp.Payload), 0)
	must(t, err)
	av := AddressVector{SrcMAC: sp.SrcMAC, DstMAC: sp.DstMAC, SrcIP: sp.SrcIP, DstIP: sp.DstIP}
	must(t, e.q.PostSend(&SendWR{ID: 1, Opcode: WRSend, SGL: []mr.SGE{sge(m, 0, len(sp.Payload))}, AH: &av,
		RemoteQPN: sp.BTH.DestQPN, RemoteQKey: sp.DETH.QKey}))
	e.q.Progress(1, e.out)
	if len(e.out.committed) != 1 {
		t.Fatalf("sent %d frames", len(e.out.committed))
	}
	compareGolden(t, "UD_SEND_ONLY", e.out.committed[0], send.data)
}

// TestResponderMatchesRxe feeds the requests of rxe captures to our
// responder and checks that it answers as rxe did: same opcode, PSN,
// syndrome and MSN for every response.
func TestResponderMatchesRxe(t *testing.T) {
	tests := []struct {
		file    string
		badKeys []uint32 // rkeys to leave unregistered
		recvs   int      // receive WQEs posted up front
		rnr     uint8
		// recvAfter posts two receive WQEs after this many requests (-1:
		// never), as rp_verbs posted its receives 100 ms late.
		recvAfter int
	}{
		{file: "rc_pingpong.pcap", recvs: 16, recvAfter: -1},
		{file: "rc_pingpong_multipkt.pcap", recvs: 16, recvAfter: -1},
		{file: "send_bw.pcap", recvs: 16, recvAfter: -1},
		{file: "write_bw.pcap", recvAfter: -1},
		{file: "read_bw.pcap", recvAfter: -1},
		{file: "atomic_bw_faa.pcap", recvAfter: -1},
		{file: "atomic_bw_cas.pcap", recvAfter: -1},
		{file: "verbs_ops.pcap", recvs: 4, recvAfter: -1},
		{file: "verbs_ops_multipkt.pcap", recvs: 4, recvAfter: -1},
		{file: "nak_access_err.pcap", badKeys: []uint32{21757}, recvAfter: -1},
		{file: "rnr_nak.pcap", rnr: 12, recvAfter: 11},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			frames := readCapture(t, tc.file)
			// The requester is the side that sends the first request.
			var reqIP = func() (ip [4]byte) {
				for _, f := range frames {
					if info, _ := f.p.BTH.Opcode.Info(); info.Request && f.p.BTH.Opcode.Known() {
						return f.p.SrcIP.As4()
					}
				}
				t.Fatal("no request in the capture")
				return
			}()
			var reqs, resps []*capFrame
			regions := map[uint32][2]uint64{} // rkey -> [lowest VA, end]
			for i := range frames {
				f := &frames[i]
				info, _ := f.p.BTH.Opcode.Info()
				fromReq := f.p.SrcIP.As4() == reqIP
				switch {
				case fromReq && info.Request:
					reqs = append(reqs, f)
					va, key, n := f.p.RETH.VA, f.p.RETH.RKey, uint64(f.p.RETH.DMALen)
					if info.Headers&wire.HasAtomicETH != 0 {
						va, key, n = f.p.Atomic.VA, f.p.Atomic.RKey, 8
					}
					if info.Headers&(wire.HasRETH|wire.HasAtomicETH) != 0 && n > 0 {
						r, ok := regions[key]
						if !ok || va < r[0] {
							r[0] = va
						}
						if va+n > r[1] {
							r[1] = va + n
						}
						regions[key] = r
					}
				case !fromReq && !info.Request:
					resps = append(resps, f)
				}
			}
			if len(reqs) == 0 || len(resps) == 0 {
				t.Fatalf("%d requests, %d responses", len(reqs), len(resps))
			}
			var keys []uint32
			var want []uint32
		next:
			for k := range regions {
				for _, b := range tc.badKeys {
					if k == b {
						continue next
					}
				}
				keys = append(keys, k^0xFFFFFFFF, k) // lkey (any), rkey
				want = append(want, k)
			}
			first := &reqs[0].p
			e := capEnd(t, RC, first.BTH.DestQPN, keys)
			for _, k := range want {
				r := regions[k]
				m, err := e.pd.RegisterIOVA(make([]byte, r[1]-r[0]), r[0], allAcc)
				must(t, err)
				if m.RKey() != k {
					t.Fatalf("registered rkey %#x, want %#x", m.RKey(), k)
				}
			}
			// Our QP answers from the responder's addresses.
			var back wire.Packet
			must(t, back.Decode(resps[0].data))
			rcConnect(t, e.q, &back, back.BTH.DestQPN, 0, first.BTH.PSN, tc.rnr)
			rb, err := e.pd.Register(make([]byte, 1<<16), mr.LocalWrite)
			must(t, err)
			for i := range tc.recvs {
				must(t, e.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(rb, 0, 1<<16)}}))
			}
			var got []wire.Packet
			for i, f := range reqs {
				if i == tc.recvAfter {
					must(t, e.q.PostRecv(&RecvWR{ID: 98, SGL: []mr.SGE{sge(rb, 0, 1<<16)}}))
					must(t, e.q.PostRecv(&RecvWR{ID: 99, SGL: []mr.SGE{sge(rb, 0, 1<<16)}}))
				}
				var in wire.Packet
				must(t, in.Decode(f.data))
				e.q.Receive(&in, int64(i+1), e.out)
				e.q.Progress(int64(i+1), e.out)
				for _, fr := range e.out.committed {
					var p wire.Packet
					must(t, p.Decode(fr))
					got = append(got, p)
				}
				e.out.committed = e.out.committed[:0]
				e.out.free = len(e.out.pool)
			}
			type sum struct {
				Op       wire.Opcode
				PSN      uint32
				Syndrome uint8
				MSN      uint32
			}
			summ := func(p *wire.Packet) sum {
				return sum{p.BTH.Opcode, p.BTH.PSN, p.AETH.Syndrome, p.AETH.MSN}
			}
			if len(got) != len(resps) {
				t.Errorf("%d responses, rxe sent %d", len(got), len(resps))
			}
			for i := range min(len(got), len(resps)) {
				if g, w := summ(&got[i]), summ(&resps[i].p); g != w {
					t.Errorf("response %d: %+v, rxe %+v", i, g, w)
				}
			}
		})
	}
}
