package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/mcast"
)

var mcastCommand = &Command{
	Name:       "mcast",
	ShortUsage: "xdproce mcast send --group ADDR [--dev IF] [flags] FILE | xdproce mcast recv --group ADDR [--dev IF] --dir DIR [flags]",
	ShortHelp:  "multicast a file to every member of a group (one packet stream, OOO WRITEs to group contexts)",
	LongHelp: `'mcast recv' joins the multicast group (IPv4 or IPv6) on --dev and announces itself on the
group's control port; 'mcast send' listens there for --wait (or one second after the
last new member), offers FILE to every member heard, and multicasts it once as OOO
WRITEs to group contexts the members define on their own memory (docs/ooo.md).
Members acknowledge every operation unicast; a member that does not gets that
operation again, unicast, on its own context (tid + 1), up to --tries times, then is
given up. Each member checks the SHA-256, writes the file under the sender's base
name in --dir, and answers; the sender prints one line per member and fails unless
every member that took the offer wrote the file.

The control datagrams are authenticated with HMAC-SHA256 under --psk-file (the same
key file as serve and send use); without a key, --insecure is required on both sides.
'mcast recv' runs until interrupted or --count files, then prints the frames it
dropped that were not for it (other groups, contexts it does not hold). --dev defaults to
the interface of the route to the group.

Examples:
  xdproce mcast recv --group 239.1.2.3 --dev eth1 --dir /srv/in --psk-file key
  xdproce mcast send --group 239.1.2.3 --dev eth1 --psk-file key image.iso`,
	Setup: setupMcast,
}

func setupMcast(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var df deviceFlags
	df.register(fs, false)
	fs.StringVar(&df.dev, "dev", "", "network `interface` to run RoCEv2 on (default: the interface of the route to --group)")
	group := fs.String("group", "", "multicast group `ADDR` (e.g. 239.1.2.3 or ff15::1:2:3), or the subnet's broadcast address (required)")
	port := fs.Int("port", mcast.DefaultPort, "control `PORT` on the group")
	psk := fs.String("psk-file", "", "authenticate the control datagrams with the pre-shared key in `FILE`")
	insecure := fs.Bool("insecure", false, "no key: anyone on the link can offer files (recv) or take them (send)")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	wait := fs.Duration("wait", 3*time.Second, "send: wait up to `DURATION` for members to announce themselves")
	tries := fs.Int("tries", 6, "send: attempts per member and operation before the member is given up")
	dir := fs.String("dir", "", "recv: `directory` files land in (required)")
	count := fs.Int("count", 0, "recv: stop after `N` files (0: until interrupted)")
	overwrite := fs.Bool("overwrite", false, "recv: replace existing files")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce mcast"
		if len(args) == 0 || args[0] != "send" && args[0] != "recv" {
			return usageErrorf(cmd, "want 'mcast send ... FILE' or 'mcast recv ...'")
		}
		g, err := netip.ParseAddr(*group)
		if err != nil {
			return usageErrorf(cmd, "--group %q: want an IPv4 or IPv6 multicast address", *group)
		}
		var key []byte
		switch {
		case *psk != "" && *insecure:
			return usageErrorf(cmd, "--psk-file and --insecure exclude each other")
		case *psk != "":
			if key, err = cm.LoadPSK(*psk); err != nil {
				return err
			}
		case !*insecure:
			return usageErrorf(cmd, "--psk-file FILE is required (or --insecure: no authentication)")
		}
		if *port < 1 || *port > 65535 {
			return usageErrorf(cmd, "--port %d", *port)
		}
		send := args[0] == "send"
		switch {
		case send && len(args) != 2:
			return usageErrorf(cmd, "mcast send takes one FILE")
		case !send && len(args) != 1:
			return usageErrorf(cmd, "mcast recv takes no arguments")
		case !send && *dir == "":
			return usageErrorf(cmd, "mcast recv needs --dir DIR")
		case send && (*tries < 1 || *wait <= 0):
			return usageErrorf(cmd, "--tries and --wait must be positive")
		}
		if df.dev == "" {
			if df.dev, err = routeDev(g.String()); err != nil {
				return fmt.Errorf("mcast: --dev not given, and %w", err)
			}
		}
		ifi, err := net.InterfaceByName(df.dev)
		if err != nil {
			return fmt.Errorf("unknown interface %q (see 'ip link' or 'xdproce info')", df.dev)
		}
		if err := mcast.CheckDest(g, ifi); err != nil {
			return usageErrorf(cmd, "--%v", err)
		}
		var data []byte
		if send {
			if data, err = os.ReadFile(args[1]); err != nil {
				return err
			}
		} else if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--dir %s: not a directory", *dir)
		}
		d, err := openDevice(env, cmd+" "+args[0], &df)
		if err != nil {
			return err
		}
		defer d.Close()
		if send {
			res, err := mcast.Send(ctx, mcast.Config{Dev: d.Device, Iface: ifi, Group: g, Port: *port, PSK: key,
				Wait: *wait, MaxTries: *tries, Log: env.Log}, filepath.Base(args[1]), data)
			if err != nil {
				return err
			}
			return printMcastSend(env, res, *jsonOut)
		}
		mb, err := mcast.NewMember(mcast.RecvConfig{Dev: d.Device, Iface: ifi, Group: g, Port: *port, PSK: key,
			Dir: *dir, Overwrite: *overwrite, Log: env.Log})
		if err != nil {
			return err
		}
		defer mb.Close()
		for n := 0; *count == 0 || n < *count; n++ {
			rcv, err := mb.Next(ctx)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					break
				}
				return err
			}
			if err := printMcastRecv(env, rcv, *jsonOut); err != nil {
				return err
			}
		}
		s := d.Snapshot(false)
		notLocal, _ := s.XDP.Get("xdp_passed_not_local")
		_, err = fmt.Fprintf(env.Stderr, "mcast recv: dropped %d frames for no context here (unknown_qpn), %d RoCE frames to addresses or groups not joined (xdp not_local)\n",
			d.Stats().DropUnknownQPN, notLocal)
		return err
	}
}

func printMcastSend(env *Env, r *mcast.Result, asJSON bool) error {
	failed := 0
	for _, m := range r.Members {
		if !m.OK {
			failed++
		}
	}
	if asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(r); err != nil {
			return err
		}
	} else {
		secs := r.Elapsed.Seconds()
		fmt.Fprintf(env.Stdout, "sent %s: %d bytes, sha256 %s, %d operations, %d multicast data frames (segment %d), %.2f s, %.1f MB/s\n",
			r.Name, r.Size, r.SHA256, r.Ops, r.Frames, r.Segment, secs, float64(r.Size)/max(secs, 1e-9)/1e6)
		for _, m := range r.Members {
			state := "ok"
			if !m.OK {
				state = "FAILED: " + m.Error
			}
			fmt.Fprintf(env.Stdout, "member %v: %s; %d operations acknowledged, %d unicast retries (%d bytes)\n",
				m.Addr, state, m.Acked, m.Retries, m.RetryBytes)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d members did not get %s", failed, len(r.Members), r.Name)
	}
	return nil
}

func printMcastRecv(env *Env, r *mcast.Received, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(r)
	}
	if !r.OK {
		_, err := fmt.Fprintf(env.Stdout, "%s from %v: FAILED: %s\n", r.Name, r.From, r.Error)
		return err
	}
	_, err := fmt.Fprintf(env.Stdout, "received %s from %v: %d bytes, sha256 %s ok, written to %s\n", r.Name, r.From, r.Size, r.SHA256, r.Path)
	return err
}
