package roce_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestConnRegistration: what a daemon client tells the daemon of its
// connected queue pairs. Connect (RC and UC) registers the peer's GID and
// QPN once, while the queue pair is still in INIT (before the engine takes
// RTR); the connection then moves data. A registration the daemon refuses
// fails Modify and leaves the queue pair in INIT; a Modify the engine
// refuses withdraws its registration. Reset and Destroy withdraw it; a
// move to Error does not; UD queue pairs never register. A re-connect
// after Reset registers the new peer.
func TestConnRegistration(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200})
	log := roce.RecordConns(p.a)
	x, y := connectRC(t, p, connCfg{})
	want := []string{fmt.Sprintf("connect %#x to %v %#x in INIT", x.qp.QPN(), roce.IPFromGID(y.endpoint(t).GID), y.qp.QPN())}
	if got := log.Take(); !slices.Equal(got, want) {
		t.Fatalf("Connect told %q, want %q", got, want)
	}
	copy(x.buf, "registered")
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{x.sge(0, 10)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess || string(y.buf[:10]) != "registered" {
		t.Fatalf("WRITE: %+v, %q", wc, y.buf[:10])
	}

	if err := x.qp.Modify(&roce.Attr{State: roce.StateError}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	if got := log.Take(); len(got) != 0 {
		t.Errorf("Error told %q", got)
	}
	if err := x.qp.Modify(&roce.Attr{State: roce.StateReset}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	want = []string{fmt.Sprintf("disconnect %#x in RESET", x.qp.QPN())}
	if got := log.Take(); !slices.Equal(got, want) {
		t.Errorf("Reset told %q, want %q", got, want)
	}
	// Re-connected to another peer (the same QPN, another PSN: a new
	// queue pair as far as the daemon is concerned).
	z := newSide(t, p.b, roce.RC, connCfg{}, 7)
	if err := x.qp.Connect(x.psn, z.endpoint(t), nil); err != nil {
		t.Fatal(err)
	}
	want = []string{fmt.Sprintf("connect %#x to %v %#x in INIT", x.qp.QPN(), roce.IPFromGID(z.endpoint(t).GID), z.qp.QPN())}
	if got := log.Take(); !slices.Equal(got, want) {
		t.Errorf("re-connect told %q, want %q", got, want)
	}
	if err := x.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	want = []string{fmt.Sprintf("disconnect %#x in gone", x.qp.QPN())}
	if got := log.Take(); !slices.Equal(got, want) {
		t.Errorf("Destroy told %q, want %q", got, want)
	}

	// Refused by the daemon: Modify fails, the queue pair stays in INIT.
	u := newSide(t, p.a, roce.UC, connCfg{}, 1)
	log.Fail = true
	if err := u.qp.Connect(1, y.endpoint(t), nil); err == nil || u.qp.State() != roce.StateInit {
		t.Errorf("Connect with the registration refused: %v, state %v", err, u.qp.State())
	}
	log.Take()
	// Refused by the engine (RTR without a path MTU): withdrawn.
	av, err := p.a.ResolveAV(y.endpoint(t).GID, x.endpoint(t).GID)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.qp.Modify(&roce.Attr{State: roce.StateRTR, AV: av, DestQPN: y.qp.QPN()},
		roce.AttrState|roce.AttrAV|roce.AttrDestQPN); err == nil {
		t.Fatal("RTR without a path MTU was taken")
	}
	want = []string{fmt.Sprintf("connect %#x to %v %#x in INIT", u.qp.QPN(), roce.IPFromGID(y.endpoint(t).GID), y.qp.QPN()),
		fmt.Sprintf("disconnect %#x in INIT", u.qp.QPN())}
	if got := log.Take(); !slices.Equal(got, want) {
		t.Errorf("a refused RTR told %q, want %q", got, want)
	}

	ud := newSide(t, p.a, roce.UD, connCfg{}, 1)
	if err := ud.qp.Activate(0x1234, 1); err != nil {
		t.Fatal(err)
	}
	if err := ud.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := log.Take(); len(got) != 0 {
		t.Errorf("a UD queue pair told %q", got)
	}
}
