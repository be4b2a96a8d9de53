// Package xsk is xdproce's AF_XDP link: one AF_XDP socket per receive queue,
// each with its own UMEM, written directly on golang.org/x/sys/unix.
//
// A Socket implements link.Link. Open opens one per rx queue of an interface
// (Device); frames reach a socket only once an XDP program redirects them into
// its XSKMAP slot — package bpf does that for RoCEv2 (bpf.Attach(ifname,
// localIPs, dev.FDs(), nil)); this package does not import bpf.
// Device.Link makes the device's sockets one link.Link: the socket itself, or
// for several queues a MultiQueue, which receives from every socket in turn,
// sends through the first, and waits on all of them (a link.Napper too).
//
// UMEM and rings: the UMEM is anonymous mmap'd memory split into 4 KiB chunks,
// half for receiving (all on the fill ring at start), half for sending. The
// fill, completion, RX and TX rings are mmap'd from the socket; their
// producer/consumer indexes are read and written with atomic loads and
// stores. XDP_USE_NEED_WAKEUP is on by default, so syscalls are made only when
// the kernel asks for them (copy mode always asks on TX). XDP_MAX_TX_SKB_BUDGET
// is raised to the TX ring size where the kernel has it (6.17+), so one
// sendto pushes a whole batch.
//
// Large frames: a chunk receives at most 3840 bytes in copy mode (4096 minus
// the kernel's 256-byte headroom), so for MTUs above 3818 the socket binds
// with XDP_USE_SG: a received frame spanning several descriptors
// (XDP_PKT_CONTD) is joined in place when its chunks follow each other in
// the UMEM, as the fill ring's order makes them almost always (each fragment
// moved onto the end of the one before, over the kernel's headroom: at PMTU
// 4096 the last ~300 bytes move), else copied into a reassembly buffer
// (Stats: RxJoined, RxCopied); a transmit buffer is a run of adjacent chunks
// sent as several descriptors. PMTU 4096 RoCE frames at MTU 9000 therefore
// work (Linux 6.6+).
//
// Buffer ownership: Receive returns frames that alias the UMEM (or a
// reassembly buffer) and stay valid until the next Receive; their chunks go
// back to the fill ring then, in the order they were received. Alloc hands out transmit buffers of
// Props().MaxFrame bytes inside the UMEM; they belong to the caller until
// passed to Send (which always takes them back) or Free. Send identifies a
// buffer by where it starts, so frames must start at the start of an Alloc
// buffer.
//
// Concurrency: one goroutine receives (Receive, Wait, Nap); Alloc, Send and
// Free are serialized inside the Socket, so several goroutines may send
// beside the receiving one (the xdproce daemon's clients each send their
// frames to the wire); Wake, Close, Stats, Props and SetXDPMode may be called
// from any goroutine.
// Close wakes a blocked Wait and waits for a running call to finish before
// unmapping the memory. The per-frame path allocates nothing and makes no
// syscalls beyond the wakeups the kernel asks for.
//
// Modes: the default bind lets the kernel choose zero-copy where the driver
// supports it and copy mode otherwise (veth and tap: copy only); BindCopy and
// BindZeroCopy force one. A bind that fails with EBUSY — the queue of a socket
// closed a moment ago is released asynchronously — is retried for up to two
// seconds.
//
// Kernel and privileges: the package is Linux only (elsewhere it has just
// QueueCount, which reports link.ErrNotSupported). Linux 5.4+ (need_wakeup), 6.6+ for multi-buffer;
// CAP_NET_RAW to create the socket and CAP_NET_ADMIN/CAP_BPF for the XDP
// program that feeds it (or root). The UMEM is pinned memory: before Linux
// 5.11, or under a memory cgroup limit, raise RLIMIT_MEMLOCK or grant
// CAP_IPC_LOCK.
//
// Errors: Open errors name the step that failed and wrap the errno
// (os.SyscallError), with a hint for permission and memory-lock failures; a
// missing kernel feature (zero-copy, multi-buffer) wraps link.ErrNotSupported.
// The probes ProbeZeroCopy, ProbeNeedWakeup and ProbeMultiBuffer return nil
// (supported), an error wrapping link.ErrNotSupported (not supported) or
// another error (inconclusive). After Close, operations return link.ErrClosed.
// Send reports ErrForeignBuffer or ErrFrameTooLarge (package variables: the
// per-frame path makes no new errors).
package xsk
