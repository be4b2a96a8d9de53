//go:build !linux

package xsk

import (
	"fmt"
	"runtime"

	"github.com/xdproce/xdproce/link"
)

// QueueCount reports an error wrapping link.ErrNotSupported: AF_XDP is Linux
// only, and outside Linux this is all the package has.
func QueueCount(ifname string) (int, error) {
	return 0, fmt.Errorf("xsk: queue count of %s: AF_XDP %w on %s", ifname, link.ErrNotSupported, runtime.GOOS)
}
