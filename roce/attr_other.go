//go:build !linux

package roce

import (
	"fmt"

	"github.com/xdproce/xdproce/link"
)

// InterfaceAttr is only available on Linux.
func InterfaceAttr(ifname string, opts *Options) (DeviceAttr, PortAttr, error) {
	return DeviceAttr{}, PortAttr{}, fmt.Errorf("roce: interface attributes of %s: %w", ifname, link.ErrNotSupported)
}
