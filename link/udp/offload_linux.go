package udp

import "golang.org/x/sys/unix"

// enableOffload turns on UDP_GRO on the socket and GSO for Send. Whether
// UDP_SEGMENT works depends on the kernel and the device the route takes:
// before Linux 6.11 the kernel refuses it with EIO on a device without
// transmit checksum offload (the relay labs turn offloads off); since then it
// checksums the segments in software. So GSO is not probed here but on the
// first refusal, which turns it off (gso_linux.go). What is off and why is
// logged once at info level.
func (l *Link) enableOffload() {
	if err := unix.SetsockoptInt(l.fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		l.log.Info("udp: receiving one datagram per message: the kernel refused UDP_GRO", "err", err)
	} else {
		l.gro = true
	}
	l.gso.Store(true)
}
