package cli

import (
	"fmt"
	"io"

	"github.com/xdproce/xdproce/roce"
)

// devAttr is roce.DeviceAttr under ibv_devinfo -v's names.
type devAttr struct {
	FWVer           string `json:"fw_ver"`
	NodeGUID        string `json:"node_guid"`
	SysImageGUID    string `json:"sys_image_guid"`
	VendorID        uint32 `json:"vendor_id"`
	VendorPartID    uint32 `json:"vendor_part_id"`
	HWVer           uint32 `json:"hw_ver"`
	MaxMRSize       uint64 `json:"max_mr_size"`
	PageSizeCap     uint64 `json:"page_size_cap"`
	MaxQP           int    `json:"max_qp"`
	MaxQPWR         int    `json:"max_qp_wr"`
	MaxSGE          int    `json:"max_sge"`
	MaxSGERD        int    `json:"max_sge_rd"`
	MaxInline       int    `json:"max_inline_data"`
	MaxCQ           int    `json:"max_cq"`
	MaxCQE          int    `json:"max_cqe"`
	MaxMR           int    `json:"max_mr"`
	MaxPD           int    `json:"max_pd"`
	MaxQPRdAtom     int    `json:"max_qp_rd_atom"`
	MaxQPInitRdAtom int    `json:"max_qp_init_rd_atom"`
	MaxResRdAtom    int    `json:"max_res_rd_atom"`
	AtomicCap       string `json:"atomic_cap"`
	MaxSRQ          int    `json:"max_srq"`
	MaxSRQWR        int    `json:"max_srq_wr"`
	MaxSRQSGE       int    `json:"max_srq_sge"`
	MaxPKeys        int    `json:"max_pkeys"`
	PhysPortCnt     int    `json:"phys_port_cnt"`
}

// portAttr is roce.PortAttr under ibv_devinfo -v's names (MTUs in bytes).
type portAttr struct {
	State       string `json:"state"`
	PhysState   string `json:"phys_state"`
	MaxMTU      int    `json:"max_mtu"`
	ActiveMTU   int    `json:"active_mtu"`
	GIDTblLen   int    `json:"gid_tbl_len"`
	MaxMsgSz    uint32 `json:"max_msg_sz"`
	PKeyTblLen  int    `json:"pkey_tbl_len"`
	LinkLayer   string `json:"link_layer"`
	ActiveWidth string `json:"active_width"`
	ActiveSpeed string `json:"active_speed"`
	SpeedMbps   int    `json:"speed_mbps"`
}

// guidString formats a GUID as ibv_devinfo does (xxxx:xxxx:xxxx:xxxx).
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func newDevAttr(a roce.DeviceAttr) *devAttr {
	return &devAttr{FWVer: a.FWVer, NodeGUID: guidString(a.NodeGUID), SysImageGUID: guidString(a.SysImageGUID),
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer, MaxMRSize: a.MaxMRSize,
		PageSizeCap: a.PageSizeCap, MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, MaxSGE: a.MaxSGE, MaxSGERD: a.MaxSGERD,
		MaxInline: a.MaxInline, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR, MaxPD: a.MaxPD,
		MaxQPRdAtom: a.MaxQPRdAtom, MaxQPInitRdAtom: a.MaxQPInitRdAtom, MaxResRdAtom: a.MaxResRdAtom,
		AtomicCap: a.AtomicCap.String(), MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE,
		MaxPKeys: a.MaxPKeys, PhysPortCnt: a.PhysPortCnt}
}

func newPortAttr(p roce.PortAttr) *portAttr {
	w, s := p.ActiveRate()
	return &portAttr{State: p.State.String(), PhysState: p.PhysState.String(), MaxMTU: p.MaxMTU.Bytes(),
		ActiveMTU: p.ActiveMTU.Bytes(), GIDTblLen: p.GIDTblLen, MaxMsgSz: p.MaxMsgSz, PKeyTblLen: p.PKeyTblLen,
		LinkLayer: p.LinkLayer, ActiveWidth: w, ActiveSpeed: s, SpeedMbps: p.SpeedMbps}
}

// printAttrs prints the device and port attributes of an interface, as
// ibv_devinfo -v words them.
func printAttrs(w io.Writer, in *ifaceInfo) {
	if d := in.Device; d != nil {
		fmt.Fprintf(w, "  RoCE device: fw_ver %s, node_guid %s, sys_image_guid %s, vendor_id 0x%x, vendor_part_id %d, hw_ver 0x%x\n",
			d.FWVer, d.NodeGUID, d.SysImageGUID, d.VendorID, d.VendorPartID, d.HWVer)
		fmt.Fprintf(w, "    max_qp %d, max_qp_wr %d, max_sge %d, max_sge_rd %d, max_inline_data %d, max_mr %d, max_mr_size 0x%x\n",
			d.MaxQP, d.MaxQPWR, d.MaxSGE, d.MaxSGERD, d.MaxInline, d.MaxMR, d.MaxMRSize)
		fmt.Fprintf(w, "    max_cq %d, max_cqe %d, max_pd %d, max_qp_rd_atom %d, max_qp_init_rd_atom %d, max_res_rd_atom %d\n",
			d.MaxCQ, d.MaxCQE, d.MaxPD, d.MaxQPRdAtom, d.MaxQPInitRdAtom, d.MaxResRdAtom)
		fmt.Fprintf(w, "    atomic_cap %s, max_srq %d, max_pkeys %d, page_size_cap 0x%x, phys_port_cnt %d\n",
			d.AtomicCap, d.MaxSRQ, d.MaxPKeys, d.PageSizeCap, d.PhysPortCnt)
	}
	if p := in.Port; p != nil {
		fmt.Fprintf(w, "  port 1: %s (%s), max_mtu %d, active_mtu %d, link_layer %s, gid_tbl_len %d, max_msg_sz 0x%x, active_width %s, active_speed %s\n",
			p.State, p.PhysState, p.MaxMTU, p.ActiveMTU, p.LinkLayer, p.GIDTblLen, p.MaxMsgSz, p.ActiveWidth, p.ActiveSpeed)
	}
}
