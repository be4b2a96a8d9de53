package netlab

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openPacket opens a non-blocking AF_PACKET socket that receives every frame
// arriving on the interface (not those it sends) and sends on it.
func openPacket(ifindex int) (int, error) {
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("socket(AF_PACKET): %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("setsockopt(PACKET_IGNORE_OUTGOING): %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind(AF_PACKET): %w", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// pollIn waits up to timeout (nanosecond resolution, so a bottleneck's pacing
// and a delay need not round to milliseconds) for the poll events of pfd.
func pollIn(pfd []unix.PollFd, timeout time.Duration) error {
	ts := unix.NsecToTimespec(int64(timeout))
	_, err := unix.Ppoll(pfd, &ts, nil)
	return err
}

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// A batchReader reads several frames per system call (recvmmsg(2)).
type batchReader struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
}

func newBatchReader(n int) *batchReader {
	return &batchReader{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n)}
}

// read receives up to len(bufs) frames without blocking, frame i into
// bufs[i] with its length in lens[i], and returns how many arrived (0 and
// EAGAIN when none waited).
func (r *batchReader) read(fd int, bufs [][]byte, lens []int) (int, error) {
	for i, b := range bufs {
		r.iovs[i].Base = &b[0]
		r.iovs[i].SetLen(len(b))
		r.hdrs[i] = mmsghdr{}
		r.hdrs[i].hdr.Iov = &r.iovs[i]
		r.hdrs[i].hdr.SetIovlen(1)
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.hdrs[0])),
		uintptr(len(bufs)), unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	for i := range int(n) {
		lens[i] = int(r.hdrs[i].n)
	}
	return int(n), nil
}
