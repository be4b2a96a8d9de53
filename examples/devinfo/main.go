// Command devinfo opens a RoCE device on a network interface and prints what
// ibv_devinfo -v would: the link chosen (AF_XDP or kernel UDP, and why), the
// path MTU and the GID table in rxe's order.
//
//	go run ./examples/devinfo -dev eth1 [-link auto|xsk|udp]
//
// AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or root); without them
// -link auto falls back to UDP and says so. Only use an interface you may
// attach an XDP program to.
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
	for i, g := range d.GIDs() {
		fmt.Printf("  GID[%d]:   %v\n", i, g)
	}
}
