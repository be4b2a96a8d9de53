// Package roce is the RDMA facade applications import: a Device over a link
// (AF_XDP, kernel UDP or an in-memory pipe) with protection domains, memory
// regions, completion queues and queue pairs in the shape of ibverbs.
//
//	dev, err := roce.Open("eth1", &roce.Options{Link: roce.LinkAuto})
//	pd := dev.AllocPD()
//	m, err := pd.RegMR(buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead)
//	cq, err := dev.CreateCQ(256)
//	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: 64})
//	err = q.Connect(myPSN, remote, nil) // remote roce.Endpoint; RESET → INIT → RTR → RTS
//	err = q.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled, ...})
//	n, err := cq.Wait(ctx, wcs) // wcs[0].Status == roce.WCSuccess
//
// Applications import roce alone: it re-exports the types, constants and
// sentinel errors of roce/mr, roce/qp and roce/wire that they need (opcodes,
// send flags, completion statuses, queue pair states, attribute masks, MTUs,
// limits). The names denote the same types and values as in the
// sub-packages, so errors.Is(err, roce.ErrState) and errors.Is(err,
// qp.ErrState) agree. QP.State, Query and Stats report on a queue pair.
//
// # Progress engine
//
// Each Device runs one goroutine that owns the link and the protocol state of
// every queue pair: it reads a batch of received frames, decodes them with
// roce/wire (frames with a bad ICRC, malformed frames and frames for unknown
// QPNs are dropped and counted in Stats), hands each to its queue pair, runs
// the queue pairs whose doorbell rang (a Post or Modify from any goroutine) or
// whose timer is due, sends the frames they produced in one batch, and waits on
// the link until the next frame, doorbell or deadline. Work requests and
// completions cross between application goroutines and the engine through the
// per-QP submission queues and the CQ rings of roce/qp; the data path
// allocates nothing per packet.
//
// The engine sleeps in the link's Wait when idle; Options.BusyPoll makes it
// poll for a while after activity instead (round trips of a few
// microseconds instead of a hundred or more on veth, for a busy core), and
// BusyPollAuto spins only briefly after sending, for about twice the recent
// send-to-receive gap, and stops spinning while replies take longer.
//
// # Links and addresses
//
// Open chooses the link (LinkAuto, LinkFacts.Choose): AF_XDP (link/xsk with
// the XDP steering program of package bpf) on a NIC with zero-copy AF_XDP
// when the process is privileged, otherwise kernel UDP sockets (link/udp)
// with GSO/GRO, which on veth and other virtual devices move a batch of
// frames per skb where copy-mode AF_XDP pays one per frame; Device.LinkName
// and Device.LinkReason say which and why. Under AF_XDP there is one socket per
// rx queue (the steering program redirects a frame to the socket of the queue
// it arrived on); one engine serves them all through one link
// (xsk.MultiQueue), which receives from each in turn and sends through the
// first. Over UDP, Open binds port 4791 (Options.UDPPort) on all addresses,
// with the socket bound to the interface (SO_BINDTODEVICE): one such device
// per interface and port. One process at a
// time receives RoCE on an interface: when another holds it (its XDP program
// would take the frames, or it has UDP port 4791 there), Open fails at once
// with a *HeldError naming the process and what it holds, instead of opening
// a link that could not receive. The exception is an xdproce daemon
// (`xdproce daemon --dev IF`), which holds an interface to share it: Open
// with LinkAuto attaches to the daemon announced for the interface (or the
// one Options.Daemon or $XDPROCE_DAEMON names; LinkDaemon insists) and runs
// the device over a shared-memory port (link/shm) to it, with queue pair
// numbers from the range the daemon gives; frames between two clients of a
// daemon never reach the NIC. The GID table follows rxe: index 0 is the
// fe80:: address made from the MAC (EUI-64), present even when IPv6 is
// disabled; index 1 is the first IPv4 address as ::ffff:a.b.c.d; then the
// other addresses. Destination MACs come from the kernel neighbour table
// through netlink; when an entry is missing, the device triggers resolution
// by sending one UDP datagram to the discard port (9) of the next hop through
// the kernel, which makes the kernel send ARP or neighbour solicitation, and
// polls the table until the entry is usable (NeighborTimeout). Over link/udp
// and link/pipe MACs are not needed and are left zero.
//
// # ICRC over link/udp
//
// Kernel UDP sockets hide the received IPv4 header, so link/udp rebuilds it
// (Props.SyntheticHeaders). The ICRC covers the IPv4 Identification, which a
// peer such as rxe sets to a counter: link/udp solves for the Identification
// that makes the ICRC right (wire.RecoverIPv4ID; the CRC is linear, so that
// is a small linear-algebra test, not a search), writes it into the frame and
// counts it (udp.Stats.RxIPIDRecovered). With GSO (link/udp's default) the
// kernel gives segment k of a UDP_SEGMENT message ID k, so link/udp moves
// each frame's ICRC to that ID before sending. The engine checks every
// frame's ICRC the same way on every link and drops a mismatch
// (Stats.DropBadICRC). The weakness: over link/udp a corrupted frame passes
// if its corruption happens to look like an ID change (about 1 in 65536
// random corruptions); UDP's own checksum, when the peer sets one, is
// checked by the kernel first.
package roce
