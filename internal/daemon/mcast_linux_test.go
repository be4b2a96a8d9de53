package daemon

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

// TestGroupFanOut: the group is joined on the interface for its first
// member and left with its last; a group frame from the wire reaches every
// member and no one else; a member's group frame reaches the other members
// and the wire; a departed member gets nothing more.
func TestGroupFanOut(t *testing.T) {
	s := newTestSwitch(t)
	d := s.d
	var joins, leaves []netip.Addr
	d.grp.join = func(g netip.Addr) (func() error, error) {
		if g == netip.MustParseAddr("239.9.9.9") {
			return nil, errors.New("the interface refuses")
		}
		joins = append(joins, g)
		return func() error { leaves = append(leaves, g); return nil }, nil
	}
	a, aEnd := s.addClient(t, 1)
	b, bEnd := s.addClient(t, 2)
	_, cEnd := s.addClient(t, 3)
	group := netip.MustParseAddr("239.1.2.3")
	for _, m := range []*client{a, b} {
		if err := d.joinGroup(m, group.String()); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.joinGroup(a, group.String()); err == nil {
		t.Error("a joined twice")
	}
	if err := d.joinGroup(a, "239.9.9.9"); err == nil || a.groups != 1 {
		t.Errorf("a join the interface refused: %v, a in %d groups", err, a.groups)
	}
	if len(joins) != 1 || joins[0] != group {
		t.Fatalf("joined on the interface: %v, want %v once", joins, group)
	}

	in := frame(t, remoteIP, group, mcastQPN, true, 0x77)
	d.fromWire(in)
	for _, end := range []struct {
		name string
		got  [][]byte
		want int
	}{{"a", recv(aEnd), 1}, {"b", recv(bEnd), 1}, {"c (no member)", recv(cEnd), 0}} {
		if len(end.got) != end.want || end.want == 1 && !bytes.Equal(end.got[0], in) {
			t.Errorf("%s got %d frames from the wire, want %d", end.name, len(end.got), end.want)
		}
	}
	if d.st.groupFrames.Load() != 2 {
		t.Errorf("group frames %d, want 2", d.st.groupFrames.Load())
	}

	out := frame(t, localIP, group, mcastQPN, true, 0x1005)
	d.fromClient(a, out)
	if got := recv(bEnd); len(got) != 1 || !bytes.Equal(got[0], out) {
		t.Errorf("b got %d of a's group frames, want the one", len(got))
	}
	if got := recv(aEnd); len(got) != 0 {
		t.Errorf("a got its own group frame back %d times", len(got))
	}
	if got := s.wireFrames(t); len(got) != 1 || !bytes.Equal(got[0][12:], out[12:]) {
		t.Errorf("%d of a's group frames to the wire, want 1", len(got))
	}

	if err := d.leaveGroup(a, group.String()); err != nil {
		t.Fatal(err)
	}
	if len(leaves) != 0 {
		t.Error("the group was left on the interface while b is still a member")
	}
	d.dropGroups(b)
	if len(leaves) != 1 || b.groups != 0 || a.groups != 0 {
		t.Errorf("left on the interface %v; a in %d groups, b in %d", leaves, a.groups, b.groups)
	}
	before := d.st.dropNoOwner.Load()
	d.fromWire(in)
	if len(recv(aEnd))+len(recv(bEnd))+len(recv(cEnd)) != 0 || d.st.dropNoOwner.Load() != before+1 {
		t.Error("a group frame after everyone left was delivered or not counted")
	}
}
