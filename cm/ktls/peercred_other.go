//go:build !linux

package ktls

import (
	"fmt"
	"net"
	"runtime"
)

// CheckPeer would check the credentials of the process at the other end of a unix socket;
// this is written for Linux's SO_PEERCRED, and elsewhere it refuses.
func CheckPeer(*net.UnixConn) error {
	return fmt.Errorf("ktls: checking a unix socket peer's credentials is Linux-only (this is %s)", runtime.GOOS)
}
