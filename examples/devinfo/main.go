// Command devinfo opens a RoCE device on a network interface and prints what
// ibv_devinfo -v would: the link chosen (AF_XDP or kernel UDP, and why), the
// device's and port's attributes (Device.Query, QueryPort) and the GID table
// in rxe's order.
//
//	go run ./examples/devinfo -dev eth1 [-link auto|xsk|udp]
//
// -link auto picks UDP with GSO on veth and other virtual devices and AF_XDP
// on a NIC with zero-copy AF_XDP, and says why. AF_XDP needs CAP_NET_ADMIN,
// CAP_NET_RAW and CAP_BPF (or root); without them -link auto picks UDP and
// says so. Only use an interface you may attach an XDP program to.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/xdproce/xdproce/roce"
)

func main() {
	dev := flag.String("dev", "", "network interface")
	kind := flag.String("link", "auto", "link: auto, xsk or udp")
	flag.Parse()
	if *dev == "" {
		log.Fatal("usage: devinfo -dev IFNAME [-link auto|xsk|udp]")
	}
	k, err := roce.ParseLinkKind(*kind)
	if err != nil {
		log.Fatal(err)
	}
	d, err := roce.Open(*dev, &roce.Options{Link: k})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	fmt.Printf("device %s\n  link:     %s (%s)\n  MAC:      %v\n  path MTU: %d (link MTU %d)\n",
		d.Name(), d.LinkName(), d.LinkReason(), d.HWAddr(), d.PathMTU().Bytes(), d.Props().MTU)
	a := d.Query()
	fmt.Printf("  node_guid: %016x  vendor_id: 0x%x  fw_ver: %s\n", a.NodeGUID, a.VendorID, a.FWVer)
	fmt.Printf("  max_qp: %d  max_qp_wr: %d  max_sge: %d  max_inline_data: %d  max_mr: %d  max_cqe: %d\n",
		a.MaxQP, a.MaxQPWR, a.MaxSGE, a.MaxInline, a.MaxMR, a.MaxCQE)
	fmt.Printf("  max_qp_rd_atom: %d  max_qp_init_rd_atom: %d  atomic_cap: %v  max_srq: %d\n",
		a.MaxQPRdAtom, a.MaxQPInitRdAtom, a.AtomicCap, a.MaxSRQ)
	p, err := d.QueryPort(1)
	if err != nil {
		log.Fatal(err)
	}
	w, sp := p.ActiveRate()
	fmt.Printf("  port 1: %v  max_mtu: %d  active_mtu: %d  link_layer: %s  active: %s %s\n",
		p.State, p.MaxMTU.Bytes(), p.ActiveMTU.Bytes(), p.LinkLayer, w, sp)
	for i, g := range d.GIDs() {
		fmt.Printf("  GID[%d]:   %v\n", i, g)
	}
}
