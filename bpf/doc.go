// Package bpf loads and attaches xdproce's XDP steering program.
//
// The program (xdp.c, compiled by bpf2go; the generated steer_bpfel/bpfeb .go
// and .o files are committed, so building needs no clang) parses Ethernet with
// at most one 802.1Q/802.1ad tag, IPv4 (with options) and IPv6, and redirects
// UDP datagrams to port 4791 whose destination is one of the device's own
// addresses (Program.AddLocalIP) into the AF_XDP socket registered for the
// receive queue (Program.SetSocket). Everything else — ARP, ND, ICMP, TCP,
// other UDP, IP fragments, frames it cannot parse, RoCE for a queue without a
// socket — goes to the kernel with XDP_PASS. A per-CPU array counts packets
// and bytes per Verdict (whole frames, fragments of multi-buffer frames
// included).
//
// Attach uses a bpf_link, so the program leaves the interface when the last
// file descriptor closes — on Close and also when the process dies, even by
// SIGKILL. Native (driver) mode is tried first and generic (skb) mode on
// ERANGE, EOPNOTSUPP or EINVAL; Program.Mode reports which. The program is
// loaded with BPF_F_XDP_HAS_FRAGS (section "xdp.frags"): without it, native
// XDP on veth refuses MTUs above about 3500 bytes, and frames of 9000-byte
// MTUs could not be seen.
//
// Kernel and privileges: Linux 6.1 or later (multi-buffer XDP, bpf_link XDP
// attach); CAP_BPF and CAP_NET_ADMIN (or root) to load and attach, and on
// kernels before 5.11 RLIMIT_MEMLOCK raised (or CAP_IPC_LOCK) for the maps.
// Not CAP_PERFMON: without it the verifier refuses arithmetic between packet
// pointers and variable offsets added to them, so the program has neither
// (the frame length comes from bpf_xdp_get_buff_len, the UDP header after
// IPv4 options is copied out with bpf_xdp_load_bytes).
//
// Errors: permission failures wrap os.ErrPermission and name the capabilities;
// an interface that already has another XDP program gives an error wrapping
// ErrBusy; verifier rejections say "the verifier refused it" and keep
// *ebpf.VerifierError reachable with errors.As. A Program is safe for concurrent use.
package bpf
