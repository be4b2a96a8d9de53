package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/roce"
)

var statCommand = &Command{
	Name:       "stat",
	ShortUsage: "xdproce stat [--json] [--watch INTERVAL] [--qp] [PID | --dev IF]",
	ShortHelp:  "print the counters of running xdproce processes (serve, bench, pingpong, send, get)",
	LongHelp: `Stat prints the counters of the devices that running xdproce processes have
open: the device's (named as rxe's hw_counters where the meaning is the
same: sent_pkts, rcvd_pkts, duplicate_request, ..., then xdproce's own:
retransmits, icrc_errors, ...), the XDP steering program's verdicts
(xdp_redirected, xdp_passed, ...) over AF_XDP, and with --qp each queue
pair's. docs/counters.md says what each counts.

Every command that opens a device answers on a unix socket, mode 0600, in
/run/xdproce when it runs as root, else in $XDG_RUNTIME_DIR/xdproce
($XDPROCE_RUN_DIR overrides both), so stat sees the processes of its own
user (root: root's). Give a PID, or --dev IF for the processes on that
interface (those in stat's own network namespace when there are any, else
all of them), or nothing for all.

With --watch INTERVAL stat prints again every INTERVAL, with each counter's
rate per second since the previous print, until interrupted. --json prints
one JSON object per device per print instead: pid, command, netns, time,
device, link, qps, counters {NAME: VALUE, ...}, xdp {...}, per_qp [{qpn,
type, state, counters}] (with --qp).

EXAMPLES
  xdproce stat
  xdproce stat --dev eth1 --watch 1s
  xdproce stat --json 4242 | jq .counters.sent_pkts`,
	Setup: setupStat,
}

func setupStat(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	jsonOut := fs.Bool("json", false, "print one JSON object per device")
	watch := fs.Duration("watch", 0, "print again every `INTERVAL` (e.g. 1s) until interrupted")
	dev := fs.String("dev", "", "only the processes on `interface` IF")
	perQP := fs.Bool("qp", false, "include each queue pair's counters")
	return func(ctx context.Context, args []string) error {
		const cmd = "xdproce stat"
		pid := 0
		switch {
		case len(args) > 1:
			return usageErrorf(cmd, "unexpected argument %q", args[1])
		case len(args) == 1:
			n, err := strconv.Atoi(args[0])
			if err != nil || n <= 0 {
				return usageErrorf(cmd, "bad PID %q", args[0])
			}
			if *dev != "" {
				return usageErrorf(cmd, "give a PID or --dev, not both")
			}
			pid = n
		}
		if *watch < 0 || (*watch > 0 && *watch < 10*time.Millisecond) {
			return usageErrorf(cmd, "--watch %v: want an interval of 10ms or more", *watch)
		}
		dir, err := stat.Dir()
		if err != nil {
			return fmt.Errorf("stat: %w", err)
		}
		entries, err := selectStat(dir, pid, *dev)
		if err != nil {
			return err
		}
		out := bufio.NewWriter(env.Stdout)
		prev := map[string]*stat.Reply{}
		for {
			n := 0
			for _, e := range entries {
				r, err := stat.Query(e.Path, *perQP, 2*time.Second)
				if err != nil {
					if errors.Is(err, stat.ErrStale) {
						env.Log.Debug("stale stat socket removed", "path", e.Path)
					} else {
						env.Log.Warn("stat", "pid", e.PID, "device", e.Device, "err", err)
					}
					continue
				}
				n++
				if *jsonOut {
					b, err := json.Marshal(r)
					if err != nil {
						return fmt.Errorf("stat: %w", err)
					}
					out.Write(b)
					out.WriteByte('\n')
				} else {
					printStat(out, r, prev[e.Path])
				}
				prev[e.Path] = r
			}
			if err := out.Flush(); err != nil {
				return fmt.Errorf("stat: write: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("stat: no process answered (%d stat sockets in %s)", len(entries), dir)
			}
			if *watch == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(*watch):
			}
		}
	}
}

// selectStat finds the stat sockets of the process pid, or of the devices
// on ifname, or all.
func selectStat(dir string, pid int, ifname string) ([]stat.Entry, error) {
	all, err := stat.List(dir)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("stat: no running xdproce process has a stat socket in %s", dir)
	}
	var sel []stat.Entry
	switch {
	case pid != 0:
		for _, e := range all {
			if e.PID == pid {
				sel = append(sel, e)
			}
		}
		if len(sel) == 0 {
			return nil, fmt.Errorf("stat: process %d has no stat socket in %s (running xdproce processes: %s)", pid, dir, describeEntries(all))
		}
	case ifname != "":
		ns, _ := stat.NetNS()
		var other []stat.Entry
		for _, e := range all {
			switch {
			case e.Device != ifname:
			case e.NetNS == ns:
				sel = append(sel, e)
			default:
				other = append(other, e)
			}
		}
		if len(sel) == 0 {
			sel = other
		}
		if len(sel) == 0 {
			return nil, fmt.Errorf("stat: no xdproce process runs on %s (running: %s)", ifname, describeEntries(all))
		}
	default:
		sel = all
	}
	return sel, nil
}

func describeEntries(es []stat.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = fmt.Sprintf("PID %d on %s", e.PID, e.Device)
	}
	return strings.Join(parts, ", ")
}

// printStat prints one reply as a table; with prev, each counter's rate per
// second since prev.
func printStat(out *bufio.Writer, r, prev *stat.Reply) {
	fmt.Fprintf(out, "PID %d (%s) %s, netns %d, %s, %d queue pairs, at %s\n",
		r.PID, r.Command, r.Device, r.NetNS, r.Link, r.QPs, r.Time.UTC().Format("15:04:05.000"))
	var secs float64
	if prev != nil {
		secs = r.Time.Sub(prev.Time).Seconds()
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	table := func(indent string, cs, old roce.Counters) {
		for _, c := range cs {
			fmt.Fprintf(tw, "%s%s\t%d\t", indent, c.Name, c.Value)
			if secs > 0 {
				if o, ok := old.Get(c.Name); ok && c.Value >= o {
					fmt.Fprintf(tw, "%.0f/s\t", float64(c.Value-o)/secs)
				} else {
					fmt.Fprint(tw, "\t")
				}
			}
			fmt.Fprintln(tw)
		}
	}
	var old roce.Snapshot
	if prev != nil {
		old = *prev.Snapshot
	}
	table("  ", r.Counters, old.Counters)
	if r.XDPError != "" {
		fmt.Fprintf(tw, "  xdp counters unavailable: %s\n", r.XDPError)
	}
	table("  ", r.XDP, old.XDP)
	for _, q := range r.PerQP {
		fmt.Fprintf(tw, "  queue pair %#x %s %s\n", q.QPN, q.Type, q.State)
		var oq roce.Counters
		for _, p := range old.PerQP {
			if p.QPN == q.QPN {
				oq = p.Counters
			}
		}
		table("    ", q.Counters, oq)
	}
	tw.Flush()
	out.WriteByte('\n')
}
