package roce_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestFacadeUsersImportOnlyRoce: the packages that use queue pairs (the
// examples, the CLI, file transfer, the tool peer, enlarge, cm, am and lmrm) import
// neither roce/qp nor roce/mr in their non-test files: roce re-exports what
// they need.
func TestFacadeUsersImportOnlyRoce(t *testing.T) {
	goTool := testenv.Tool(t, "go", "it lists the packages' imports")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pkgs := []string{"./examples/...", "./internal/cli", "./internal/xfer", "./internal/toolpeer", "./enlarge", "./cm", "./am", "./lmrm"}
	// One line per package and import: "package import".
	format := `{{range .Imports}}{{$.ImportPath}} {{.}}{{"\n"}}{{end}}`
	cmd := exec.CommandContext(ctx, goTool, append([]string{"list", "-f", format}, pkgs...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/xdproce/xdproce/"
	listed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imp, _ := strings.Cut(l, " ")
		listed[pkg] = true
		if imp == mod+"roce/qp" || imp == mod+"roce/mr" {
			t.Errorf("%s imports %s (use package roce's names)", pkg, imp)
		}
	}
	if len(listed) < len(pkgs) || !listed[mod+"enlarge"] || !listed[mod+"am"] || !listed[mod+"examples/pipe-rdma"] {
		t.Fatalf("go list showed the imports of %d packages, want at least %d:\n%s", len(listed), len(pkgs), out)
	}
}

// TestFacadeHasNoEscapeHatches: the facade does not hand out its engine
// objects.
func TestFacadeHasNoEscapeHatches(t *testing.T) {
	for _, c := range []struct {
		v      any
		method string
	}{{(*roce.QP)(nil), "Engine"}, {(*roce.PD)(nil), "MRPD"}, {(*roce.Device)(nil), "Table"}} {
		if _, ok := reflect.TypeOf(c.v).MethodByName(c.method); ok {
			t.Errorf("%T has a %s method", c.v, c.method)
		}
	}
}

// TestQPStateQueryStats: State and Query follow the queue pair through
// Connect and Destroy, Query returns the connection's attributes, errors
// match roce's sentinels, and Stats counts the retransmissions a lossy link
// forces, as the device's sums do.
func TestQPStateQueryStats(t *testing.T) {
	p, la, _ := newPipeDevices(t, pipe.Config{Seed: 7, AtoB: pipe.Faults{Loss: 0.2}})
	x := newSide(t, p.a, roce.RC, connCfg{}, 0x1000)
	y := newSide(t, p.b, roce.RC, connCfg{}, 0x2000)
	if st := x.qp.State(); st != roce.StateReset {
		t.Errorf("new queue pair in %v, want RESET", st)
	}
	err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRSend, Flags: roce.Signaled})
	if !errors.Is(err, roce.ErrState) {
		t.Errorf("send in RESET: %v, want roce.ErrState", err)
	}
	opts := roce.DefaultConnectOptions()
	opts.Timeout = 8 // ≈ 1 ms: losses recover quickly
	if err := x.qp.Connect(x.psn, y.endpoint(t), &opts); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.Connect(y.psn, x.endpoint(t), &opts); err != nil {
		t.Fatal(err)
	}
	st, attr := x.qp.Query()
	if st != roce.StateRTS || x.qp.State() != roce.StateRTS {
		t.Errorf("connected queue pair in %v (State %v), want RTS", st, x.qp.State())
	}
	if attr.DestQPN != y.qp.QPN() || attr.SQPSN != x.psn || attr.RQPSN != y.psn || attr.PathMTU != p.a.PathMTU() ||
		attr.Timeout != opts.Timeout || attr.RetryCnt != opts.RetryCnt {
		t.Errorf("Query: %+v; want DestQPN %#x, SQPSN %#x, RQPSN %#x, PathMTU %v, Timeout %d, RetryCnt %d",
			attr, y.qp.QPN(), x.psn, y.psn, p.a.PathMTU(), opts.Timeout, opts.RetryCnt)
	}

	const n, size = 20, 16 << 10
	fill(x.buf[:n*size], 3)
	for i := range n {
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
			SGL: []roce.SGE{x.sge(i*size, size)}, RemoteAddr: y.mr.Addr() + uint64(i*size), RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess || wc.Opcode != roce.WCRDMAWrite {
			t.Fatalf("completion %+v", wc)
		}
	}
	if string(y.buf[:n*size]) != string(x.buf[:n*size]) {
		t.Fatal("the writes did not land byte-exact")
	}
	qs := x.qp.Stats()
	if la.Stats().Lost == 0 || qs.Retransmits == 0 {
		t.Fatalf("%d frames lost, queue pair stats %+v: want losses and retransmits", la.Stats().Lost, qs)
	}
	if ds := p.a.Stats(); ds.Retransmits != qs.Retransmits || ds.Timeouts != qs.Timeouts {
		t.Errorf("device counts %d retransmits, %d timeouts; its one queue pair %d, %d",
			ds.Retransmits, ds.Timeouts, qs.Retransmits, qs.Timeouts)
	}
	if ys := y.qp.Stats(); ys.SeqNAKsSent+ys.Duplicates == 0 {
		t.Errorf("responder saw no sequence gap or duplicate under loss: %+v", ys)
	}

	if err := x.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if st := x.qp.State(); st != roce.StateError {
		t.Errorf("destroyed queue pair in %v, want ERR", st)
	}
	if got := x.qp.Stats(); got.Retransmits != qs.Retransmits {
		t.Errorf("stats after Destroy: %+v, want those before (%+v)", got, qs)
	}
	err = x.qp.PostSend(roce.SendWR{ID: 99, Opcode: roce.WRSend, Flags: roce.Signaled})
	if !errors.Is(err, roce.ErrDestroyed) && !errors.Is(err, roce.ErrState) {
		t.Errorf("send after Destroy: %v, want roce.ErrDestroyed or roce.ErrState", err)
	}
	if err := x.qp.Destroy(); !errors.Is(err, roce.ErrDestroyed) {
		t.Errorf("second Destroy: %v, want roce.ErrDestroyed", err)
	}
}

// TestErrorsNameRoceOnce: the facade's errors say "roce:" once, also when the
// cause comes from a step that has errors of its own (Connect's Modify and
// address resolution, NewDevice's checks).
func TestErrorsNameRoceOnce(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x := newSide(t, p.a, roce.RC, connCfg{}, 0x1000)
	y := newSide(t, p.b, roce.RC, connCfg{}, 0x2000)
	if err := x.qp.Connect(x.psn, y.endpoint(t), nil); err != nil {
		t.Fatal(err)
	}
	_, errNewDevice := roce.NewDevice(nil, nil)
	_, errResolve := p.a.ResolveAV(netip.MustParseAddr("2001:db8::1"), netip.Addr{})
	for what, err := range map[string]error{
		"second Connect": x.qp.Connect(x.psn, y.endpoint(t), nil),
		"Connect to a GID of another family": y.qp.Connect(y.psn,
			roce.Endpoint{QPN: x.qp.QPN(), GID: netip.MustParseAddr("2001:db8::1")}, nil),
		"NewDevice without a link":  errNewDevice,
		"ResolveAV":                 errResolve,
		"Modify without attributes": x.qp.Modify(nil, roce.AttrState),
	} {
		if err == nil {
			t.Errorf("%s: no error", what)
		} else if n := strings.Count(err.Error(), "roce:"); n != 1 {
			t.Errorf("%s: %q names roce %d times", what, err, n)
		}
	}
	if err := x.qp.Connect(x.psn, y.endpoint(t), nil); !errors.Is(err, roce.ErrState) {
		t.Errorf("second Connect: %v, want roce.ErrState", err)
	}
}
