package udp

import "golang.org/x/sys/unix"

// DisableUDPChecksum turns off UDP checksums on l's socket (SO_NO_CHECK,
// UDP_NO_CHECK6_TX). The kernel then refuses UDP_SEGMENT with EINVAL: a
// refusal tests can cause on any kernel (older ones refuse with EIO on a
// device without checksum offload).
func DisableUDPChecksum(l *Link) error {
	if err := unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
		return err
	}
	if l.v6 {
		return unix.SetsockoptInt(l.fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1)
	}
	return nil
}
