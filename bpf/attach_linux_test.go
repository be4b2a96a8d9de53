package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/internal/netlab"
)

// xdpState reports the XDP program on the interface: its id and attach mode
// (netlink's XDP_ATTACHED_*: 1 driver, 2 skb), 0 when none.
func xdpState(t *testing.T, e *netlab.Iface) (id uint32, mode uint32) {
	t.Helper()
	err := e.NS.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id, mode = x.ProgId, x.AttachMode
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, mode
}

func attachIn(e *netlab.Iface, p *Program, m Mode) error {
	return e.NS.Do(func() error { return p.Attach(e.Name, m) })
}

func TestPrivilegedAttachModes(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		for _, m := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
			t.Run(fmt.Sprintf("%d/%v", mtu, m), func(t *testing.T) {
				topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
				p := loadForTest(t)
				if err := attachIn(topo.B, p, m); err != nil {
					t.Fatal(err)
				}
				wantMode, wantNL := ModeNative, uint32(1)
				if m == ModeGeneric {
					wantMode, wantNL = ModeGeneric, 2
				}
				if got := p.Mode(); got != wantMode {
					t.Errorf("Mode() = %v, want %v (veth supports native XDP, with frags up to MTU 9000)", got, wantMode)
				}
				id, nl := xdpState(t, topo.B)
				if id == 0 || nl != wantNL {
					t.Errorf("interface XDP state: id %d, mode %d, want mode %d", id, nl, wantNL)
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				if id, _ := xdpState(t, topo.B); id != 0 {
					t.Errorf("program %d still attached after Close", id)
				}
			})
		}
	}
}

func TestPrivilegedAttachBusy(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{})
	p1 := loadForTest(t)
	if err := attachIn(topo.B, p1, ModeAuto); err != nil {
		t.Fatal(err)
	}
	p2 := loadForTest(t)
	err := attachIn(topo.B, p2, ModeAuto)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second attach: %v, want ErrBusy", err)
	}
	t.Logf("second attach: %v", err)
	if err := attachIn(topo.B, p1, ModeAuto); err == nil {
		t.Error("attaching an attached program again succeeded")
	}
	// A program attached the old way (netlink, as `ip link set xdp` does) blocks us too.
	p1.Close()
	err = topo.B.NS.Do(func() error {
		l, err := netlink.LinkByName(topo.B.Name)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, p2.objs.XdpSteer.FD(), 1<<1 /* XDP_FLAGS_SKB_MODE */)
	})
	if err != nil {
		t.Fatal(err)
	}
	p3 := loadForTest(t)
	if err := attachIn(topo.B, p3, ModeGeneric); !errors.Is(err, ErrBusy) {
		t.Errorf("attach over a netlink-attached program: %v, want ErrBusy", err)
	}
}

// The bpf_link dies with the process: a child attaches and is killed with
// SIGKILL; afterwards the interface has no program.
func TestPrivilegedAttachSIGKILL(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{})
	p := loadForTest(t) // only for the privilege gate and a loadable program
	p.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAttachAndHang$", "-test.v")
	cmd.Env = append(os.Environ(), "XDPROCE_HELPER_NS="+topo.B.NS.Name, "XDPROCE_HELPER_IF="+topo.B.Name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s := sc.Text(); len(s) > 9 && s[:9] == "ATTACHED " {
				ready <- s[9:]
			}
		}
		close(ready)
	}()
	select {
	case mode, ok := <-ready:
		if !ok {
			t.Fatal("helper exited before attaching")
		}
		t.Logf("child attached in %s mode", mode)
	case <-time.After(20 * time.Second):
		t.Fatal("helper did not attach within 20s")
	}
	if id, _ := xdpState(t, topo.B); id == 0 {
		t.Fatal("no program on the interface while the child runs")
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The link is released when the dead process's files are closed, which
	// may take a moment after wait returns.
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, _ := xdpState(t, topo.B)
		if id == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("program %d still attached 5s after SIGKILL", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And a new program attaches at once.
	p2 := loadForTest(t)
	if err := attachIn(topo.B, p2, ModeAuto); err != nil {
		t.Fatalf("attach after the holder died: %v", err)
	}
}

// TestHelperAttachAndHang is the child of TestPrivilegedAttachSIGKILL.
func TestHelperAttachAndHang(t *testing.T) {
	nsName, ifName := os.Getenv("XDPROCE_HELPER_NS"), os.Getenv("XDPROCE_HELPER_IF")
	if nsName == "" {
		t.Skip("helper process for TestPrivilegedAttachSIGKILL")
	}
	ns := &netlab.NS{Name: nsName}
	var p *Program
	err := ns.Do(func() (err error) {
		p, err = Attach(ifName, []netip.Addr{local4}, nil, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ATTACHED " + p.Mode().String() + " " + strconv.Itoa(os.Getpid()))
	time.Sleep(60 * time.Second)
	t.Fatal("not killed")
}

// NameOf finds the attached program by the id netlink reports, under the
// name Name.
func TestPrivilegedNameOf(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{})
	p := loadForTest(t)
	if err := attachIn(topo.B, p, ModeGeneric); err != nil {
		t.Fatal(err)
	}
	id, _ := xdpState(t, topo.B)
	if got := NameOf(id); got != Name {
		t.Errorf("NameOf(%d) = %q, want %q", id, got, Name)
	}
	p.Close()
	if got := NameOf(id); got != "" {
		t.Errorf("NameOf(%d) after Close = %q, want \"\"", id, got)
	}
}
