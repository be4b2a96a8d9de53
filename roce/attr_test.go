package roce_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestQueryLimits: the limits Device.Query reports are the ones the device
// enforces: each can be reached and one more is refused.
func TestQueryLimits(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{MTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	d, err := roce.NewDevice(la, &roce.Options{MaxQPs: 3, MaxMRs: 2, Addrs: []netip.Addr{addrA}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := d.Query()
	t.Logf("%+v", a)
	// EUI-64 of the MAC: universal/local bit flipped, ff:fe in the middle.
	hw := d.HWAddr()
	guid := binary.BigEndian.Uint64([]byte{hw[0] ^ 2, hw[1], hw[2], 0xff, 0xfe, hw[3], hw[4], hw[5]})
	fixed := []struct {
		name      string
		got, want any
	}{
		{"max_qp", a.MaxQP, 3}, {"max_mr", a.MaxMR, 2},
		{"node_guid", a.NodeGUID, guid}, {"sys_image_guid", a.SysImageGUID, guid},
		{"vendor_id", a.VendorID, uint32(0xffffff)}, {"atomic_cap", a.AtomicCap.String(), "ATOMIC_HCA"},
		{"max_srq", a.MaxSRQ, 1 << 16}, {"max_srq_wr", a.MaxSRQWR, 1 << 15}, {"max_srq_sge", a.MaxSRQSGE, 32}, {"phys_port_cnt", a.PhysPortCnt, 1}, {"fw_ver", a.FWVer, "0.0.0"},
		{"max_res_rd_atom", a.MaxResRdAtom, 3 * a.MaxQPRdAtom},
	}
	for _, c := range fixed {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	pd := d.AllocPD()
	// Queue sizes: the limit itself works, one more does not.
	for _, c := range []struct {
		name string
		cfg  func(n int) roce.QPConfig
		max  int
	}{
		{"max_qp_wr (send)", func(n int) roce.QPConfig { return roce.QPConfig{MaxSendWR: n} }, a.MaxQPWR},
		{"max_qp_wr (recv)", func(n int) roce.QPConfig { return roce.QPConfig{MaxRecvWR: n} }, a.MaxQPWR},
		{"max_sge", func(n int) roce.QPConfig { return roce.QPConfig{MaxSGE: n} }, a.MaxSGE},
		{"max_inline", func(n int) roce.QPConfig { return roce.QPConfig{MaxInline: n} }, a.MaxInline},
	} {
		for _, n := range []int{c.max, c.max + 1} {
			cfg := c.cfg(n)
			cfg.Type, cfg.SendCQ, cfg.RecvCQ = roce.RC, cq, cq
			q, err := pd.CreateQP(cfg)
			if (err == nil) != (n == c.max) {
				t.Fatalf("%s: CreateQP with %d: %v", c.name, n, err)
			}
			if q != nil {
				if err := q.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// READ/atomic depths through Connect.
	for _, c := range []struct {
		name string
		set  func(o *roce.ConnectOptions, n uint8)
		max  int
	}{
		{"max_qp_init_rd_atom", func(o *roce.ConnectOptions, n uint8) { o.MaxRdAtomic = n }, a.MaxQPInitRdAtom},
		{"max_qp_rd_atom", func(o *roce.ConnectOptions, n uint8) { o.MaxDestRdAtomic = n }, a.MaxQPRdAtom},
	} {
		for _, n := range []int{c.max, c.max + 1} {
			q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			o := roce.DefaultConnectOptions()
			c.set(&o, uint8(n))
			err = q.Connect(1, roce.Endpoint{QPN: 0x99, PSN: 1, GID: roce.GIDFromIP(addrB)}, &o)
			if (err == nil) != (n == c.max) {
				t.Fatalf("%s: Connect with %d: %v", c.name, n, err)
			}
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := d.CreateCQ(a.MaxCQE + 1); err == nil {
		t.Fatalf("CreateCQ(max_cqe+1 = %d) succeeded", a.MaxCQE+1)
	}
	// Counts: max_qp queue pairs, then ErrLimit; max_mr regions likewise.
	for i := range a.MaxQP + 1 {
		_, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		if (err == nil) != (i < a.MaxQP) || (err != nil && !errors.Is(err, roce.ErrLimit)) {
			t.Fatalf("QP %d with max_qp %d: %v", i+1, a.MaxQP, err)
		}
	}
	for i := range a.MaxMR + 1 {
		_, err := pd.RegMR(make([]byte, 64), roce.LocalWrite)
		if (err == nil) != (i < a.MaxMR) || (err != nil && !errors.Is(err, roce.ErrLimit)) {
			t.Fatalf("MR %d with max_mr %d: %v", i+1, a.MaxMR, err)
		}
	}

	p, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", p)
	w, s := p.ActiveRate()
	if p.State != roce.PortActive || p.PhysState != roce.PhysLinkUp || p.ActiveMTU != d.PathMTU() ||
		p.ActiveMTU != roce.MTU(3) || p.MaxMTU.Bytes() != 4096 || p.GIDTblLen != roce.GIDTableLen ||
		p.LinkLayer != "Ethernet" || w != "1X" || s != "2.5 Gbps" {
		t.Errorf("port %+v (%s %s): want ACTIVE, LINK_UP, active MTU 1024 (the pipe's 1500), max 4096, 1024 GIDs, Ethernet, 1X 2.5 Gbps (speed unknown)", p, w, s)
	}
	if _, err := d.QueryPort(2); err == nil {
		t.Error("QueryPort(2) succeeded on a one-port device")
	}
	if !d.PortActive() {
		t.Error("PortActive false on a NewDevice")
	}
}
