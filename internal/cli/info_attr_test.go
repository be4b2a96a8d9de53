package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/roce"
)

// TestInfoJSONDeviceAttributes: info --json reports, under ibv_devinfo's
// names, what a device opened on the interface reports through Query and
// QueryPort.
func TestInfoJSONDeviceAttributes(t *testing.T) {
	r := runBinary(t, "info", "--json", "lo")
	if r.code != 0 {
		t.Fatalf("info: exit %d: %s", r.code, r.stderr)
	}
	var rep struct {
		Interfaces []struct {
			Device map[string]any `json:"device"`
			Port   map[string]any `json:"port"`
		} `json:"interfaces"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber() // exact 64-bit values
	if err := dec.Decode(&rep); err != nil || len(rep.Interfaces) != 1 {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	// A device on lo, on a free UDP port (4791 may be another test's).
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	pc.Close()
	d, err := roce.Open("lo", &roce.Options{Link: roce.LinkUDP, UDPPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := d.Query()
	p, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	guid := func(g uint64) string {
		return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
	}
	w, s := p.ActiveRate()
	check := func(what string, got map[string]any, want map[string]any) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d fields, want %d: %v", what, len(got), len(want), got)
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || fmt.Sprint(g) != fmt.Sprint(v) {
				t.Errorf("%s.%s = %v (present %v), want %v", what, k, g, ok, v)
			}
		}
	}
	check("device", rep.Interfaces[0].Device, map[string]any{
		"fw_ver": a.FWVer, "node_guid": guid(a.NodeGUID), "sys_image_guid": guid(a.SysImageGUID),
		"vendor_id": a.VendorID, "vendor_part_id": a.VendorPartID, "hw_ver": a.HWVer,
		"max_mr_size": a.MaxMRSize, "page_size_cap": a.PageSizeCap, "max_qp": a.MaxQP,
		"max_qp_wr": a.MaxQPWR, "max_sge": a.MaxSGE, "max_sge_rd": a.MaxSGERD, "max_inline_data": a.MaxInline,
		"max_cq": a.MaxCQ, "max_cqe": a.MaxCQE, "max_mr": a.MaxMR, "max_pd": a.MaxPD,
		"max_qp_rd_atom": a.MaxQPRdAtom, "max_qp_init_rd_atom": a.MaxQPInitRdAtom,
		"max_res_rd_atom": a.MaxResRdAtom, "atomic_cap": "ATOMIC_HCA", "max_srq": a.MaxSRQ,
		"max_srq_wr": a.MaxSRQWR, "max_srq_sge": a.MaxSRQSGE, "max_pkeys": a.MaxPKeys,
		"phys_port_cnt": a.PhysPortCnt,
	})
	check("port", rep.Interfaces[0].Port, map[string]any{
		"state": "PORT_ACTIVE", "phys_state": "LINK_UP", "max_mtu": p.MaxMTU.Bytes(),
		"active_mtu": p.ActiveMTU.Bytes(), "gid_tbl_len": p.GIDTblLen, "max_msg_sz": p.MaxMsgSz,
		"pkey_tbl_len": p.PKeyTblLen, "link_layer": "Ethernet", "active_width": w, "active_speed": s,
		"speed_mbps": p.SpeedMbps,
	})
}
