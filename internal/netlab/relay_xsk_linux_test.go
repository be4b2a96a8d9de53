package netlab_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
)

// xskEnd opens AF_XDP sockets and the steering program on e.
func xskEnd(t *testing.T, e *netlab.Iface) *xsk.Socket {
	t.Helper()
	var dev *xsk.Device
	var prog *bpf.Program
	err := e.NS.Do(func() (err error) {
		if dev, err = xsk.Open(e.Name, nil); err != nil {
			return err
		}
		prog, err = bpf.Attach(e.Name, []netip.Addr{e.IPv4}, dev.FDs(), nil)
		return err
	})
	if dev != nil {
		t.Cleanup(func() { dev.Close() })
	}
	if prog != nil {
		t.Cleanup(func() { prog.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return dev.Sockets[0]
}

// roceFrame writes an Ethernet/IPv4/UDP(4791) frame of n bytes whose payload
// encodes seq.
func roceFrame(b []byte, src, dst *netlab.Iface, seq uint32, n int) []byte {
	b = b[:n]
	clear(b)
	copy(b[0:], dst.HWAddr)
	copy(b[6:], src.HWAddr)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	b[14] = 0x45
	binary.BigEndian.PutUint16(b[16:], uint16(n-14))
	b[22], b[23] = 64, 17
	s, d := src.IPv4.As4(), dst.IPv4.As4()
	copy(b[26:], s[:])
	copy(b[30:], d[:])
	var sum uint32
	for i := 14; i < 34; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(b[24:], ^uint16(sum+sum>>16))
	binary.BigEndian.PutUint16(b[34:], 49441)
	binary.BigEndian.PutUint16(b[36:], 4791)
	binary.BigEndian.PutUint16(b[38:], uint16(n-34))
	binary.BigEndian.PutUint32(b[42:], seq)
	for i := 46; i < n; i++ {
		b[i] = byte(int(seq) * i)
	}
	return b
}

// AF_XDP at both ends of A–relay–B: what B's socket receives matches the
// relay's counters exactly (lost frames missing, duplicates twice, corrupted
// ones damaged, reordered ones out of order).
func TestPrivilegedRelayXSK(t *testing.T) {
	rc := netlab.RelayConfig{Seed: 7, Loss: 0.02, Reorder: 0.01, Duplicate: 0.005, Corrupt: 0.001}
	rc.Corrupt = 0.01 // enough corruptions to count in a short run
	// Only RoCE frames are impaired (and so counted): the kernels' own
	// chatter (IPv6 ND, MLD) passes untouched.
	rc.Filter = func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 && binary.BigEndian.Uint16(f[36:]) == 4791
	}
	topo := netlab.Relayed(t, netlab.LinkConfig{MTU: 1500}, rc)
	a, b := xskEnd(t, topo.A), xskEnd(t, topo.B)
	const n, size = 5000, 512
	bufs := make([][]byte, 32)
	rx := make([][]byte, 64)
	var seqs []uint32
	damaged := 0
	recv := func() {
		k, err := b.Receive(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:k] {
			seq := binary.BigEndian.Uint32(f[42:])
			ok := len(f) == size && seq < n
			for i := 46; ok && i < size; i++ {
				ok = f[i] == byte(int(seq)*i)
			}
			if !ok {
				damaged++
				continue
			}
			seqs = append(seqs, seq)
		}
	}
	for sent := 0; sent < n; {
		k := a.Alloc(bufs[:min(len(bufs), n-sent)])
		for i := range k {
			bufs[i] = roceFrame(bufs[i], topo.A, topo.B, uint32(sent+i), size)
		}
		if err := a.Send(bufs[:k]); err != nil {
			t.Fatal(err)
		}
		sent += k
		recv()
		time.Sleep(200 * time.Microsecond) // the relay forwards through AF_PACKET: stay within its pace
	}
	for idle := time.Now(); time.Since(idle) < 300*time.Millisecond; {
		before := len(seqs) + damaged
		recv()
		if len(seqs)+damaged != before {
			idle = time.Now()
		}
		b.Wait(10 * time.Millisecond)
	}
	st := topo.Relay.Stats()
	t.Logf("B got %d intact + %d damaged; relay %+v", len(seqs), damaged, st)
	want := n - st.Lost + st.Duplicated
	if got := uint64(len(seqs) + damaged); got != want {
		t.Errorf("B received %d frames, want %d sent - %d lost + %d duplicated = %d", got, n, st.Lost, st.Duplicated, want)
	}
	if st.Lost == 0 || st.Reordered == 0 || st.Duplicated == 0 || st.Corrupted == 0 {
		t.Errorf("some fault never happened: %+v", st)
	}
	if uint64(damaged) < st.Corrupted || uint64(damaged) > 2*st.Corrupted {
		t.Errorf("%d damaged frames for %d corruptions", damaged, st.Corrupted)
	}
	inv := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			inv++
		}
	}
	if inv == 0 {
		t.Error("no reordering seen at B")
	}
}
