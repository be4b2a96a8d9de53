package interop

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CM loss against a kernel: a tc classifier on the tap's host end drops the first CM message
// of one kind (by MAD attribute ID) in one direction, and the RDMA CM of one side or the other
// must recover by its retries. It sees the frames only with link/udp (AF_XDP takes them before
// tc), so these rows run over link/udp.

// CM MAD attribute IDs (IBA Vol 1, 16.7.1).
const (
	attrREQ  = 0x0010
	attrREP  = 0x0013
	attrRTU  = 0x0014
	attrDREP = 0x0016
)

// Frame offsets of an IPv4 RoCEv2 frame to QP1 (Ethernet 14, IPv4 20, UDP 8, BTH 12, DETH 8,
// then the MAD).
const (
	offEtherType = 12
	offIPProto   = 14 + 9
	offUDPDst    = 14 + 20 + 2
	offBTHDestQP = 14 + 20 + 8 + 4 // the word whose low 24 bits are the destination QP
	offMAD       = 14 + 20 + 8 + 12 + 8
	offMgmtClass = offMAD + 1
	offAttrID    = offMAD + 16
	mgmtClassCM  = 0x07
)

// madDropper drops the first limit IPv4 CM MADs with one attribute ID crossing the tap's host
// end in one direction.
type madDropper struct {
	m *ebpf.Map // one uint32: how many were dropped
}

// dropFirstMAD attaches the dropper to g's tap (ingress: frames from the guest; egress: frames
// to it) until t ends.
func dropFirstMAD(t *testing.T, g *guest, ingress bool, attr uint16, limit int32) *madDropper {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatalf("bpf map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	const tcActOK, tcActShot = 0, 2
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // LoadAbs reads the skb in R6
		asm.LoadAbs(offEtherType, asm.Half),
		asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"),
		asm.LoadAbs(offIPProto, asm.Byte),
		asm.JNE.Imm(asm.R0, unix.IPPROTO_UDP, "pass"),
		asm.LoadAbs(offUDPDst, asm.Half),
		asm.JNE.Imm(asm.R0, 4791, "pass"),
		asm.LoadAbs(offBTHDestQP, asm.Word),
		asm.And.Imm(asm.R0, 0xffffff),
		asm.JNE.Imm(asm.R0, 1, "pass"),
		asm.LoadAbs(offMgmtClass, asm.Byte),
		asm.JNE.Imm(asm.R0, mgmtClassCM, "pass"),
		asm.LoadAbs(offAttrID, asm.Half),
		asm.JNE.Imm(asm.R0, int32(attr), "pass"),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.JGE.Imm(asm.R1, limit, "pass"),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R0, tcActShot),
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcActOK).WithSymbol("pass"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("bpf program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	parent := uint32(netlink.HANDLE_MIN_EGRESS)
	if ingress {
		parent = netlink.HANDLE_MIN_INGRESS
	}
	err = g.inNetns(func() error {
		l, err := netlink.LinkByName(g.tap)
		if err != nil {
			return err
		}
		q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
		if err := netlink.QdiscReplace(q); err != nil {
			return fmt.Errorf("clsact qdisc: %w", err)
		}
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: parent,
			Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd: prog.FD(), Name: "xdproce-interop-drop", DirectAction: true}
		if err := netlink.FilterAdd(f); err != nil {
			netlink.QdiscDel(q)
			return fmt.Errorf("bpf filter: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tc on %s in %s: %v", g.tap, g.netns, err)
	}
	t.Cleanup(func() {
		g.inNetns(func() error {
			l, err := netlink.LinkByName(g.tap)
			if err != nil {
				return err
			}
			return netlink.QdiscDel(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"})
		})
	})
	return &madDropper{m: m}
}

// dropped is how many MADs the dropper took.
func (d *madDropper) dropped(t *testing.T) int {
	var n uint32
	if err := d.m.Lookup(uint32(0), &n); err != nil {
		t.Fatalf("bpf map: %v", err)
	}
	return int(n)
}
