package ktls

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// CheckPeer checks the credentials (SO_PEERCRED) of the process at the other end of a unix
// socket: it must run as this process's effective user or as root. The endpoint checks the
// proxy it hands its handshake to, and the proxy the endpoints it hands keys to.
func CheckPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("ktls: peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("ktls: peer credentials: %w", err)
	}
	if gerr != nil {
		return fmt.Errorf("ktls: peer credentials: %w", gerr)
	}
	if me := uint32(os.Geteuid()); cred.Uid != me && cred.Uid != 0 {
		return fmt.Errorf("ktls: unix socket peer is pid %d uid %d; only uid %d or root may use it", cred.Pid, cred.Uid, me)
	}
	return nil
}
