package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/xdproce/xdproce/internal/daemon"
	"github.com/xdproce/xdproce/internal/stat"
	"github.com/xdproce/xdproce/roce"
)

var daemonCommand = &Command{
	Name:       "daemon",
	ShortUsage: "xdproce daemon --dev IF [--socket PATH] [--mode 0660] [--group GROUP] [--link auto|xsk|udp] [--qpns N] [--max-clients N] [--max-mrs N] [--max-shared SIZE]",
	ShortHelp:  "share one interface among local processes",
	LongHelp: `Daemon holds the interface (the XDP steering program and an AF_XDP socket per
queue when privileged, else the kernel UDP socket; --link chooses) and lets
local xdproce processes use it at once. Each client gets a shared-memory port
(link/shm) over the unix socket: its frames go through the daemon, which
gives it a range of --qpns queue pair numbers of its own, steers received
frames to the client owning their destination QPN, and switches frames
between two of its clients port to port: they never reach the NIC.

A process opening an interface a daemon serves attaches to it (--link auto,
the default, says so at info level; --link daemon insists; --daemon PATH or
$XDPROCE_DAEMON names a socket, for example one mounted into a container).

The socket defaults to /run/xdproce/daemon-IF-NETNS.sock (root; NETNS is the
network namespace's inode number, so same-named interfaces in different
namespaces do not collide), else under $XDG_RUNTIME_DIR/xdproce. Its mode
(--mode, default 0660) and group (--group) decide who may attach; every
client's PID, UID and GID are logged.

'xdproce stat PID' prints the daemon's counters (frames from and to the wire,
switched between clients, dropped and why, its open descriptors and
goroutines) and, with --qp, each client's (its PID, command, QPN range,
frames each way, frames dropped for a foreign source or QPN).

Not yet: the RDMA CM (frames to QP1 are dropped), direct placement into
shared memory regions.

EXAMPLES
  sudo xdproce daemon --dev eth1 --group rdma
  xdproce serve --dev eth1 --insecure --dir /srv/in      # attaches to the daemon
  XDPROCE_DAEMON=/run/xdproce/daemon-eth1-4026531840.sock xdproce bench --dev eth1 198.51.100.2`,
	Setup: setupDaemon,
}

func setupDaemon(fs *flag.FlagSet, env *Env) func(context.Context, []string) error {
	var (
		cfg  daemon.Config
		lk   linkFlag
		mode string
	)
	fs.StringVar(&cfg.Interface, "dev", "", "network `interface` to serve (required)")
	fs.StringVar(&cfg.Socket, "socket", "", "unix socket `PATH` clients attach to (default /run/xdproce/daemon-IF-NETNS.sock)")
	fs.StringVar(&mode, "mode", "0660", "permission `bits` of the socket")
	fs.StringVar(&cfg.Group, "group", "", "`group` (name or number) owning the socket")
	fs.Var(&lk, "link", "the interface's frame `path`: auto (the fastest link there, as for the other commands: 'xdproce info' says which and why), xsk or udp")
	fs.IntVar(&cfg.QPNs, "qpns", daemon.DefaultQPNs, "queue pair numbers per client (a power of two; also its limit on queue pairs)")
	fs.IntVar(&cfg.MaxClients, "max-clients", daemon.DefaultMaxClients, "clients served at once")
	fs.IntVar(&cfg.MaxMRs, "max-mrs", 0, "memory regions per client (0: the library's default)")
	maxShared := Size(daemon.DefaultMaxShare)
	fs.Var(&maxShared, "max-shared", "`bytes` of memory each client may share with the daemon for direct placement (PD.AllocMR; beyond it, ordinary memory)")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usageErrorf("xdproce daemon", "unexpected argument %q", args[0])
		}
		if cfg.Interface == "" {
			return usageErrorf("xdproce daemon", "--dev IF is required")
		}
		m, err := strconv.ParseUint(mode, 8, 32)
		if err != nil || m > 0o777 {
			return usageErrorf("xdproce daemon", "--mode %q: want octal permission bits such as 0660", mode)
		}
		if lk.kind == roce.LinkDaemon {
			return usageErrorf("xdproce daemon", "--link daemon: a daemon cannot attach to a daemon")
		}
		if maxShared <= 0 {
			return usageErrorf("xdproce daemon", "--max-shared %d: want a positive size", int64(maxShared))
		}
		cfg.Mode, cfg.Link, cfg.Log, cfg.MaxShared = os.FileMode(m), lk.kind, env.Log, int64(maxShared)
		d, err := daemon.Start(cfg)
		if err != nil {
			return withPermissionHint(err)
		}
		st, err := stat.Listen(d, d.Interface(), "daemon")
		if err != nil {
			env.Log.Warn("xdproce stat cannot see this process", "err", err)
		}
		fmt.Fprintf(env.Stdout, "daemon: serving %s (%s) on %s\n", d.Interface(), d.LinkName(), d.Socket())
		<-ctx.Done()
		if st != nil {
			st.Close()
		}
		return d.Close()
	}
}
