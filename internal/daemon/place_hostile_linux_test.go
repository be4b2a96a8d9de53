package daemon

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link/shm"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// sealedMemfd is a memfd of size bytes sealed as PD.AllocMR seals it.
func sealedMemfd(t testing.TB, size int) int {
	fd, err := unix.MemfdCreate("test-region", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	return fd
}

// shareRegion gives c a daemon-shared region of size bytes, as a client's
// PD.AllocMR does, and returns the test's mapping of it.
func shareRegion(t testing.TB, d *Daemon, c *client, size int) []byte {
	fd := sealedMemfd(t, size)
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := d.addRegion(c, dup); err != nil || id != 1 {
		t.Fatalf("addRegion: %d, %v", id, err)
	}
	return mem
}

// placeMsgs decodes the placement messages waiting at a client's end.
func placeMsgs(t testing.TB, l *shm.Link) []place.Msg {
	var out []place.Msg
	for _, f := range recv(l) {
		var m place.Msg
		if err := place.Decode(f, &m); err != nil {
			t.Fatalf("client got a frame that is not a placement message: % x", f)
		}
		out = append(out, m)
	}
	return out
}

func encodePlace(m *place.Msg) []byte {
	b := make([]byte, place.MaxLen)
	return b[:place.Encode(b, m)]
}

// placeFixture is a switch with three clients sharing a 64 KiB region
// each: a (QPNs 0x1000..) requests, b (0x2000..) responds (its 0x2001
// connected to a's 0x1001), c (0x3000..) holds memory nobody may touch.
type placeFixture struct {
	s          *testSwitch
	a, b, c    *client
	aE, bE, cE *shm.Link
	am, bm, cm []byte
}

func newPlaceFixture(t testing.TB) *placeFixture {
	x := &placeFixture{s: newTestSwitch(t)}
	d := x.s.d
	x.a, x.aE = x.s.addClient(t, 1)
	x.b, x.bE = x.s.addClient(t, 2)
	x.c, x.cE = x.s.addClient(t, 3)
	x.am, x.bm, x.cm = shareRegion(t, d, x.a, 64<<10), shareRegion(t, d, x.b, 64<<10), shareRegion(t, d, x.c, 64<<10)
	// b's queue pair 0x2001 is connected to a's 0x1001 (conn_linux.go).
	if err := d.connectQP(x.b, 0x2001, localIP.String(), 0x1001); err != nil {
		t.Fatal(err)
	}
	for i := range x.cm {
		x.cm[i] = byte(i*7 + 3)
	}
	for i := range x.am {
		x.am[i] = byte(i * 13)
	}
	return x
}

func (x *placeFixture) cIntact(t testing.TB) {
	for i := range x.cm {
		if x.cm[i] != byte(i*7+3) {
			t.Fatalf("c's region changed at %d", i)
		}
	}
}

// req is a valid WRITE request from a's QP 0x1001 to b's 0x2001 of n
// bytes from a's region at off.
func req(op place.Op, off uint64, n uint32) *place.Msg {
	m := &place.Msg{Kind: place.KindReq, Op: op, SrcQPN: 0x1001, DstQPN: 0x2001, PSN: 100, NPkts: 1, Len: n, NSegs: 1}
	m.SegsBuf[0] = place.Seg{Region: 1, Len: n, Off: off}
	return m
}

// TestPlacementHostile: placement messages that name memory a client did
// not share, a QPN not its own, lengths that do not add up, answers for
// requests sent to another client or answered already, segments out of
// bounds, and garbage are refused and counted, nothing reaches the third
// client's memory, and nothing goes to the wire; the valid WRITE, SEND
// and READ in between are copied byte-exact and acknowledged in order
// (Done, then the ACK); a request for a QPN no client owns is sent back
// to be sent as frames.
func TestPlacementHostile(t *testing.T) {
	x := newPlaceFixture(t)
	d := x.s.d
	bad := func(c *client, m []byte, what string) {
		t.Helper()
		before := d.Stats().PlaceBad
		d.fromClient(c, m)
		if d.Stats().PlaceBad != before+1 {
			t.Errorf("%s: not refused", what)
		}
		if got := append(placeMsgs(t, x.aE), placeMsgs(t, x.bE)...); len(got) != 0 {
			t.Errorf("%s: delivered %+v", what, got)
		}
	}
	for _, tc := range []struct {
		what string
		m    *place.Msg
	}{
		{"region not shared", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.SegsBuf[0].Region = 2; return m }()},
		{"past the region's end", req(place.OpWrite, 60<<10, 8192)},
		{"offset wrapping", req(place.OpWrite, 1<<64-1, 2)},
		{"lengths differ", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.Len = 8192; return m }()},
		{"foreign source QPN", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.SrcQPN = 0x3001; return m }()},
		{"unknown op", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.Op = 9; return m }()},
		{"no PSNs", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.NPkts = 0; return m }()},
		{"an indication from a client", func() *place.Msg { m := req(place.OpWrite, 0, 4096); m.Kind = place.KindInd; return m }()},
		{"an answer to nothing", &place.Msg{Kind: place.KindAns, Tag: 77, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place}},
	} {
		bad(x.a, encodePlace(tc.m), tc.what)
	}
	short := encodePlace(req(place.OpWrite, 0, 4096))
	bad(x.a, short[:len(short)-1], "truncated")
	many := bytes.Clone(short)
	many[14+4] = place.MaxSegs + 1
	bad(x.a, many, "too many segments")

	// A valid WRITE: b is told, answers with its memory; the daemon copies,
	// tells b (Done) and then a (the ACK).
	d.fromClient(x.a, encodePlace(req(place.OpWrite, 4096, 8192)))
	ind := placeMsgs(t, x.bE)
	if len(ind) != 1 || ind[0].Kind != place.KindInd || ind[0].Len != 8192 || ind[0].NSegs != 0 || ind[0].DstQPN != 0x2001 {
		t.Fatalf("b got %+v", ind)
	}
	tag := ind[0].Tag
	// c answers for b: refused, and b's answer still works after it.
	bad(x.c, encodePlace(&place.Msg{Kind: place.KindAns, Tag: tag, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place}), "c answering b's request")
	ans := &place.Msg{Kind: place.KindAns, Tag: tag, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place,
		Flags: place.FlagDone, Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), PSN: 100, MSN: 5, NSegs: 2}
	ans.SegsBuf[0] = place.Seg{Region: 1, Off: 0, Len: 4096}
	ans.SegsBuf[1] = place.Seg{Region: 1, Off: 32 << 10, Len: 4096}
	d.fromClient(x.b, encodePlace(ans))
	if !bytes.Equal(x.bm[:4096], x.am[4096:8192]) || !bytes.Equal(x.bm[32<<10:36<<10], x.am[8192:12288]) {
		t.Error("WRITE: b's region does not hold a's bytes")
	}
	if got := placeMsgs(t, x.bE); len(got) != 1 || got[0].Kind != place.KindDone || got[0].Status != 0 {
		t.Errorf("b got %+v, want Done", got)
	}
	if got := placeMsgs(t, x.aE); len(got) != 1 || got[0].Kind != place.KindAck || got[0].Status != place.AETH ||
		got[0].PSN != 100 || got[0].MSN != 5 || got[0].SrcQPN != 0x1001 {
		t.Errorf("a got %+v, want the ACK", got)
	}
	bad(x.b, encodePlace(ans), "answered twice")

	// b answers with memory past its region: nothing copied, a gets a NAK,
	// b a failed Done.
	d.fromClient(x.a, encodePlace(req(place.OpSend, 0, 4096)))
	ind = placeMsgs(t, x.bE)
	ans.Tag, ans.NSegs = ind[0].Tag, 1
	ans.SegsBuf[0] = place.Seg{Region: 1, Off: 62 << 10, Len: 4096}
	d.fromClient(x.b, encodePlace(ans))
	if got := placeMsgs(t, x.bE); len(got) != 1 || got[0].Kind != place.KindDone || got[0].Status != place.Failed {
		t.Errorf("b got %+v, want a failed Done", got)
	}
	if got := placeMsgs(t, x.aE); len(got) != 1 || got[0].Syndrome != wire.NAKRemoteOp {
		t.Errorf("a got %+v, want a NAK", got)
	}

	// A READ: b's bytes into a's region.
	copy(x.bm[40<<10:], bytes.Repeat([]byte("read me!"), 512))
	d.fromClient(x.a, encodePlace(req(place.OpRead, 16<<10, 4096)))
	ind = placeMsgs(t, x.bE)
	ans.Tag, ans.Flags = ind[0].Tag, 0
	ans.SegsBuf[0] = place.Seg{Region: 1, Off: 40 << 10, Len: 4096}
	d.fromClient(x.b, encodePlace(ans))
	if !bytes.Equal(x.am[16<<10:20<<10], x.bm[40<<10:44<<10]) {
		t.Error("READ: a's region does not hold b's bytes")
	}
	if got := placeMsgs(t, x.aE); len(got) != 1 || got[0].Status != place.AETH {
		t.Errorf("a got %+v, want the ACK", got)
	}
	if got := placeMsgs(t, x.bE); len(got) != 0 {
		t.Errorf("b got %+v without asking for Done", got)
	}

	// A request from a queue pair b's is not connected to (a's other, c's,
	// or a's to a queue pair of b's connected to a peer on the wire whose
	// QPN lies in a's range) reaches nobody, counted as a foreign
	// connection.
	if err := d.connectQP(x.b, 0x2002, remoteIP.String(), 0x1002); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what     string
		from     *client
		src, dst uint32
	}{{"a's other queue pair", x.a, 0x1002, 0x2001}, {"c's", x.c, 0x3001, 0x2001}, {"a to a queue pair connected to the wire", x.a, 0x1002, 0x2002}} {
		m := req(place.OpWrite, 0, 4096)
		m.SrcQPN, m.DstQPN = tc.src, tc.dst
		drops, bm := d.Stats().DropForeignConn, bytes.Clone(x.bm)
		d.fromClient(tc.from, encodePlace(m))
		if got := append(placeMsgs(t, x.aE), append(placeMsgs(t, x.bE), placeMsgs(t, x.cE)...)...); len(got) != 0 ||
			d.Stats().DropForeignConn != drops+1 || !bytes.Equal(x.bm, bm) {
			t.Errorf("%s: delivered %+v, drop_foreign_conn +%d", tc.what, got, d.Stats().DropForeignConn-drops)
		}
	}

	// No client owns the QPN: sent back to go as frames.
	m := req(place.OpWrite, 0, 4096)
	m.DstQPN = 0x9001
	d.fromClient(x.a, encodePlace(m))
	if got := placeMsgs(t, x.aE); len(got) != 1 || got[0].Status != place.Fallback || got[0].PSN != 100 {
		t.Errorf("a got %+v, want Fallback", got)
	}
	x.cIntact(t)
	st := d.Stats()
	if w := x.s.wireFrames(t); st.Placed != 2 || st.PlaceFailed != 1 || st.PlaceFallbacks != 1 || len(w) != 0 || st.Switched != 0 {
		t.Errorf("stats %+v, %d frames sent to the wire", st, len(w))
	}
	// Regions go with their client: a request naming them is refused.
	d.dropRegions(x.a)
	bad(x.a, encodePlace(req(place.OpWrite, 0, 4096)), "a region of a departed client")
	if _, err := d.addRegion(x.a, sealedMemfd(t, 4096)); err == nil {
		t.Error("a departed client shared a region")
	}
	// Beyond the limit on shared memory: refused.
	d.cfg.MaxShared = 64<<10 + 4096
	if _, err := d.addRegion(x.b, sealedMemfd(t, 8192)); err == nil {
		t.Error("a region past the client's limit was shared")
	}
	d.cfg.MaxShared = 0
	// Memory a client could shrink under a copy is refused.
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, 4096)
	if _, err := d.addRegion(x.b, fd); err == nil {
		t.Error("an unsealed memfd was shared")
	}
}

// FuzzPlacement: any frame from client a (placement messages or not),
// then b answering whatever indication reaches it with its whole region,
// then the same frame from b: nothing panics, c's region (c never
// answers) never changes, no placement message goes to the wire, and each
// client receives only indications, ACKs and Dones about its own QPNs.
func FuzzPlacement(f *testing.F) {
	f.Add(encodePlace(req(place.OpWrite, 0, 4096)))
	f.Add(encodePlace(req(place.OpRead, 8192, 100)))
	f.Add(encodePlace(req(place.OpSend, 60<<10, 8192)))
	f.Add(encodePlace(&place.Msg{Kind: place.KindAns, Tag: 1, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Place, NSegs: 1}))
	f.Add(encodePlace(&place.Msg{Kind: place.KindAns, Tag: 1, SrcQPN: 0x1001, DstQPN: 0x2001, Status: place.Answer}))
	f.Add([]byte{})
	x := newPlaceFixture(f)
	d := x.s.d
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4218 {
			in = in[:4218]
		}
		if !place.Is(in) {
			return // FuzzClientFrame's
		}
		d.fromClient(x.a, in)
		for _, m := range placeMsgs(t, x.bE) {
			if m.Kind != place.KindInd || m.DstQPN < x.b.first || m.DstQPN > x.b.last {
				t.Fatalf("b got %+v", m)
			}
			ans := &place.Msg{Kind: place.KindAns, Tag: m.Tag, SrcQPN: m.SrcQPN, DstQPN: m.DstQPN,
				Status: place.Place, Flags: place.FlagDone, NSegs: 1}
			ans.SegsBuf[0] = place.Seg{Region: 1, Len: m.Len}
			d.fromClient(x.b, encodePlace(ans))
		}
		d.fromClient(x.b, in)
		// Each client hears only of its own QPNs: indications for them, and
		// answers (Ack, Done) to its own requests and answers.
		for i, l := range []*shm.Link{x.aE, x.bE, x.cE} {
			c := []*client{x.a, x.b, x.c}[i]
			for _, m := range placeMsgs(t, l) {
				qpn := m.DstQPN
				if m.Kind == place.KindAck {
					qpn = m.SrcQPN
				}
				if m.Kind == place.KindReq || m.Kind == place.KindAns || qpn < c.first || qpn > c.last {
					t.Fatalf("client %d got %+v", c.id, m)
				}
			}
		}
		x.cIntact(t)
		for _, w := range x.s.wireFrames(t) {
			if place.Is(w) {
				t.Fatal("a placement message sent to the wire")
			}
		}
	})
}
