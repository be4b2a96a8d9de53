//go:build !linux

package ktls

import (
	"fmt"
	"net"
	"runtime"
)

func installKernel(net.Conn, *Params) (recordLayer, error) {
	return nil, fmt.Errorf("%w: kernel TLS is Linux-only (this is %s)", ErrNoKernelTLS, runtime.GOOS)
}

// KernelInstalled reports whether the socket under c has kernel TLS transmit state: never
// off Linux.
func KernelInstalled(*Conn) bool { return false }

// ProbeKernel reports whether kernel TLS takes sessions here: not off Linux.
func ProbeKernel() error {
	return fmt.Errorf("%w: kernel TLS is Linux-only (this is %s)", ErrNoKernelTLS, runtime.GOOS)
}
