// Package udp carries RoCEv2 over kernel UDP sockets: a link.Link that needs
// no privileges and no AF_XDP, for hosts and tests where the fast path is not
// available.
//
// Send takes the whole Ethernet frames the engine builds, reads the
// destination IP address and the UDP payload (BTH onward) from each and hands
// the payloads to the kernel in batches (sendmmsg). The kernel writes the
// Ethernet, IP and UDP headers itself: the frame's source port is replaced by
// the socket's port, and its IPv4 Identification by 0 (the socket is
// unconnected with IP_PMTUDISC_DO, so Linux sends ID 0 with DF). The RoCEv2
// ICRC covers both, so Props.SrcPort tells the engine to encode frames with
// the socket's port; then the ICRC it computed is the one the peer checks.
//
// By default (Config.NoGSO turns it off) runs of frames to one destination
// with one source, TOS and size leave as one UDP_SEGMENT message each, which
// the kernel (or the device) cuts back into the datagrams given; segment k
// of a message leaves with IPv4 Identification k, so Send moves frame k's
// ICRC to that ID first (wire.MoveIPv4ID). The socket receives with
// UDP_GRO and splits coalesced messages by their segment size, each
// message scattered over frame slots cut to the size of the last long run,
// so that the frames of a stream are returned where they landed, with no
// copy (Stats.RxGROCopied counts those that were copied). Where the
// kernel refuses UDP_SEGMENT, GSO turns off for the link and says so once
// (Config.Logger). gso_linux.go and gro_linux.go give the kernel's rules.
//
// Receive takes datagrams in batches (recvmmsg) with their destination
// address (IP_PKTINFO / IPV6_PKTINFO) and rebuilds the headers in front of
// each payload, so that the engine sees a whole frame: zero MAC addresses;
// IPv4 with ID 0, DF, TTL 64, the TOS received (IP_RECVTOS) and a valid
// checksum (or IPv6 with the traffic class received, flow label 0, hop
// limit 64); UDP from the sender's port to 4791 with checksum 0. Frames
// leave with their TOS (IP_TOS, when not 0; tos_linux.go), so ECN works
// end to end. Props.SyntheticHeaders is set. The kernel hides the
// sender's IPv4 Identification, which the ICRC covers (rxe sends a counter):
// Receive solves for the Identification that makes the ICRC right
// (wire.RecoverIPv4ID) and writes it into the frame, so the frame is the one
// sent (Stats.RxIPIDRecovered counts non-zero ones). A frame that no
// Identification explains keeps 0 and fails the engine's ICRC check;
// the ICRC of one it recovered was verified on the way, so the link
// reports it checked (ICRCChecked, link.ICRCChecker) and the engine does
// not hash the frame a second time.
//
// The socket is bound to Config.Addr (all addresses, dual-stack, when unset)
// and port 4791 by default; frames go to their destination IP at
// Config.RemotePort, by default the same port. Two links in one process use
// two loopback addresses (127.0.0.1 and 127.0.0.2) on one port. When bound to
// all addresses, each datagram carries the frame's source address
// (IPV6_PKTINFO), so the kernel sends from the address the ICRC was computed
// with.
//
// Buffer ownership, concurrency and errors are those of link.Link: one
// goroutine owns the link, Wake and Close are safe from any goroutine, and
// every method of a closed link returns link.ErrClosed. Syscall errors are
// wrapped with os.NewSyscallError, so errors.Is(err, os.ErrPermission) and
// the like work. Linux only.
package udp
