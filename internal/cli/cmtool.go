package cli

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/xdproce/xdproce/roce"
)

// The parts librdmacm's example tools udaddy and cmatose share, for
// `xdproce udaddy` and `xdproce ucmatose`.

// cmToolTOS parses -t: empty for none, else a traffic class 0 to 255.
func cmToolTOS(cmd, tos string) (v uint8, set bool, err error) {
	if tos == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(tos, 0, 8)
	if err != nil {
		return 0, false, usageErrorf(cmd, "-t %s: want a traffic class 0 to 255", tos)
	}
	return uint8(n), true, nil
}

// cmToolAddrs parses -s (the server's address: this end is the client) and
// -b (the address to listen on or send from); either may be empty.
func cmToolAddrs(cmd, server, bind string) (dst, src netip.Addr, err error) {
	for _, a := range []struct {
		flag, s string
		to      *netip.Addr
	}{{"-s", server, &dst}, {"-b", bind, &src}} {
		if a.s == "" {
			continue
		}
		ip, err := netip.ParseAddr(a.s)
		if err != nil {
			return dst, src, usageErrorf(cmd, "%s %q: want an IPv4 or IPv6 address", a.flag, a.s)
		}
		*a.to = ip.Unmap()
	}
	return dst, src, nil
}

// cmToolRun opens the device, checks -b's address is one of it, runs the
// tool (run: the client or the server, returning the tool's status),
// destroys what it made and prints the tools' closing lines ("test
// complete", "return status N"); a status other than 0 is an error.
func cmToolRun(ctx context.Context, env *Env, cmd, name string, df *deviceFlags, src netip.Addr, out io.Writer,
	run func(dev *roce.Device) (int, error), destroy func()) error {
	dev, err := openDevice(env, cmd, df)
	if err != nil {
		return err
	}
	defer closeDevice(env, dev)
	if src.IsValid() && !dev.hasAddr(src) {
		return fmt.Errorf("%s: -b %v is not an address of %s (its GIDs: %v)", name, src, dev.Name(), dev.GIDs())
	}
	status, err := run(dev.Device)
	destroy()
	fmt.Fprintln(out, "test complete")
	if err != nil {
		return fmt.Errorf("%s: %w", name, interrupted(ctx, err))
	}
	fmt.Fprintf(out, "return status %d\n", status)
	if status != 0 {
		return fmt.Errorf("%s: return status %d", name, status)
	}
	return nil
}
