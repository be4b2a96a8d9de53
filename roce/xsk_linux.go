package roce

import "github.com/xdproce/xdproce/link"

// openXSK opens AF_XDP sockets on the interface's rx queues and attaches the
// steering program for the interface's addresses.
func openXSK(info *ifaceInfo, o *Options) (link.Link, []func() error, error) {
	return nil, nil, errNoXSK
}
