package daemon

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/roce/wire"
)

// withOpcode is f (a frame from frame()) with BTH opcode op.
func withOpcode(f []byte, op wire.Opcode) []byte {
	var h header
	parse(f, &h)
	g := bytes.Clone(f)
	g[h.bth] = byte(op)
	return g
}

// TestConnSteering is the decision table of connected queue pairs: a
// client's RC/UC frame (CNP and SR too) reaches another client's queue
// pair only when that one is registered as connected to a QPN of the
// sender's at the frame's source address; unregistered, connected to a
// third client, to a peer on the wire, or from another of the interface's
// addresses: dropped and counted (the sender's drop_foreign_conn and the
// daemon's). UD (DETH-checked), OOO opcodes (third-party operations) and
// frames from the wire are not checked. Disconnecting, connecting anew and
// a departed peer whose QPN block another client gets take effect at once.
func TestConnSteering(t *testing.T) {
	s := newTestSwitch(t)
	d := s.d
	other := netip.MustParseAddr("198.51.100.9") // a second address of the interface
	d.local = append(d.local, other.As16())
	a, _ := s.addClient(t, 1)    // 0x1000..
	b, bEnd := s.addClient(t, 2) // 0x2000..: the receiver
	c, _ := s.addClient(t, 3)    // 0x3000..
	for _, r := range []struct {
		qpn  uint32
		gid  netip.Addr
		peer uint32
	}{
		{0x2001, localIP, 0x1001},  // connected to a
		{0x2002, remoteIP, 0x1001}, // to a peer on the wire
		{0x2003, localIP, 0x3001},  // to c
		{0x2005, other, 0x1005},    // to a, at the other address
	} {
		if err := d.connectQP(b, r.qpn, r.gid.String(), r.peer); err != nil {
			t.Fatal(err)
		}
	}
	rc := func(src netip.Addr, dqpn uint32) []byte { return frame(t, src, localIP, dqpn, false, 0) }
	type row struct {
		name string
		from *client
		f    []byte
		pass bool
	}
	check := func(rows []row) {
		t.Helper()
		for _, r := range rows {
			drops, all := r.from.dropConn.Load(), d.st.dropConn.Load()
			d.fromClient(r.from, r.f)
			got := recv(bEnd)
			switch {
			case r.pass && (len(got) != 1 || !bytes.Equal(got[0], r.f)):
				t.Errorf("%s: b got %d frames, want the one byte-exact", r.name, len(got))
			case r.pass && (r.from.dropConn.Load() != drops || d.st.dropConn.Load() != all):
				t.Errorf("%s: passed and counted as dropped", r.name)
			case !r.pass && (len(got) != 0 || r.from.dropConn.Load() != drops+1 || d.st.dropConn.Load() != all+1):
				t.Errorf("%s: b got %d frames, the sender's drop_foreign_conn +%d, the daemon's +%d; want 0, 1, 1",
					r.name, len(got), r.from.dropConn.Load()-drops, d.st.dropConn.Load()-all)
			}
		}
	}
	check([]row{
		{"a to its peer", a, rc(localIP, 0x2001), true},
		{"a to its peer, UC", a, withOpcode(rc(localIP, 0x2001), wire.UCSendOnly), true},
		{"a to its peer, CNP", a, withOpcode(rc(localIP, 0x2001), wire.CNP), true},
		{"a to its peer, SR opcode", a, withOpcode(rc(localIP, 0x2001), 0xE4), true},
		{"c into a's connection", c, rc(localIP, 0x2001), false},
		{"c into a's connection, UC", c, withOpcode(rc(localIP, 0x2001), wire.UCSendOnly), false},
		{"c into a's connection, CNP", c, withOpcode(rc(localIP, 0x2001), wire.CNP), false},
		{"a from another of the interface's addresses", a, rc(other, 0x2001), false},
		{"a to an unregistered queue pair", a, rc(localIP, 0x2004), false},
		{"a to one connected to the wire", a, rc(localIP, 0x2002), false},
		{"a to one connected to c", a, rc(localIP, 0x2003), false},
		{"c to its peer", c, rc(localIP, 0x2003), true},
		{"a at the other address", a, rc(other, 0x2005), true},
		{"a at the IPv4 address to the other's", a, rc(localIP, 0x2005), false},
		{"UD from a's QPN, unregistered", a, frame(t, localIP, localIP, 0x2004, true, 0x1001), true},
		{"OOO opcode from c, unregistered", c, withOpcode(rc(localIP, 0x2004), 0xC0), true},
	})
	// From the wire: the engine's to check.
	in := rc(remoteIP, 0x2004)
	d.fromWire(in)
	if got := recv(bEnd); len(got) != 1 || !bytes.Equal(got[0], in) {
		t.Errorf("from the wire to an unregistered queue pair: b got %d frames, want the one", len(got))
	}

	// Disconnected, then connected to c's queue pair.
	if err := d.disconnectQP(b, 0x2001); err != nil {
		t.Fatal(err)
	}
	check([]row{{"a after disconnect", a, rc(localIP, 0x2001), false}})
	if err := d.connectQP(b, 0x2001, localIP.String(), 0x3002); err != nil {
		t.Fatal(err)
	}
	check([]row{{"a after re-connect to c", a, rc(localIP, 0x2001), false}, {"c after re-connect", c, rc(localIP, 0x2001), true}})

	// c departs (as release does: its block free, then forgetConns); w
	// gets its QPN block and cannot use c's connections.
	d.owners[c.block].Store(nil)
	d.forgetConns(c)
	w, _ := s.addClient(t, 3)
	if w.first != c.first {
		t.Fatalf("w got %#x.., want c's %#x..", w.first, c.first)
	}
	check([]row{{"w in c's old block", w, rc(localIP, 0x2001), false}, {"w, c's other connection", w, rc(localIP, 0x2003), false}})
	if c.cn.m != nil {
		t.Errorf("the departed client keeps %d registrations", len(c.cn.m))
	}

	st := d.Stats()
	for _, cs := range st.Clients {
		if cs.ID == b.id && cs.Conns != 4 {
			t.Errorf("b's connected_qps %d, want 4", cs.Conns)
		}
		if cs.ID == a.id && cs.DropForeignConn != a.dropConn.Load() {
			t.Errorf("a's DropForeignConn %d, want %d", cs.DropForeignConn, a.dropConn.Load())
		}
	}
	if st.DropForeignConn != d.st.dropConn.Load() || st.DropForeignConn == 0 {
		t.Errorf("daemon DropForeignConn %d", st.DropForeignConn)
	}
}

// TestConnRequests: registrations a client cannot make (another client's
// QPN, QP1, the multicast QPN or QPN 0 as peer, an unparsable GID) are
// refused with a reason; a client can register at most its range, one
// entry per QPN, and unregistering one not registered is no error.
func TestConnRequests(t *testing.T) {
	s := newTestSwitch(t)
	s.d.shift = 4 // 16 QPNs a client: register them all
	a, _ := s.addClient(t, 0x101)
	for _, tc := range []struct{ msg, want string }{
		{`{"op":"connqp","qpn":4113,"gid":"198.51.100.1","peer_qpn":4114}`, ""},
		{`{"op":"connqp","qpn":4113,"gid":"2001:db8::1","peer_qpn":77}`, ""},
		{`{"op":"connqp","qpn":4096,"gid":"198.51.100.1","peer_qpn":4114}`, "not the client's"},
		{`{"op":"connqp","qpn":4113,"gid":"198.51.100.1","peer_qpn":1}`, "no connected queue pair's"},
		{`{"op":"connqp","qpn":4113,"gid":"198.51.100.1","peer_qpn":16777215}`, "no connected queue pair's"},
		{`{"op":"connqp","qpn":4113,"gid":"198.51.100.1"}`, "no connected queue pair's"},
		{`{"op":"connqp","qpn":4113,"gid":"nonsense","peer_qpn":5}`, "peer GID"},
		{`{"op":"connqp","qpn":4113,"peer_qpn":5}`, "peer GID"},
		{`{"op":"connqp","qpn":"x"}`, "malformed request"},
		{`{"op":"disconnqp","qpn":4112}`, ""},
		{`{"op":"disconnqp","qpn":4112}`, ""},
		{`{"op":"disconnqp","qpn":1}`, "not the client's"},
	} {
		r := s.d.control(a, []byte(tc.msg), nil)
		if tc.want == "" && r.Error != "" || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s: %q, want %q", tc.msg, r.Error, tc.want)
		}
	}
	if n := a.connCount(); n != 1 {
		t.Errorf("%d registrations after registering one QPN twice", n)
	}
	for q := uint32(0); q < 1<<16; q++ {
		s.d.connectQP(a, q, "198.51.100.1", 0x4321)
	}
	if n, size := a.connCount(), int(a.last-a.first+1); n != size || size != 16 {
		t.Errorf("%d registrations, the client's range holds %d", n, size)
	}
}
