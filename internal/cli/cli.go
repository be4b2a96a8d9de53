package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
)

// A Command is one subcommand of xdproce. Adding a subcommand is one entry in
// the commands table.
type Command struct {
	Name       string // "dump"
	ShortUsage string // "xdproce dump [flags] FILE..."
	ShortHelp  string // one line, shown in the subcommand list
	LongHelp   string // paragraphs shown by "xdproce dump -h", with examples
	// Setup registers the command's flags on fs and returns the function that
	// runs it with the positional arguments once the flags are parsed.
	Setup func(fs *flag.FlagSet, env *Env) func(ctx context.Context, args []string) error
}

// Env is what a command runs with.
type Env struct {
	Stdout io.Writer    // data
	Stderr io.Writer    // diagnostics
	Log    *slog.Logger // to Stderr at --log-level; set after the flags are parsed, so read it when running
}

// commands is the table of subcommands, in the order the help lists them.
var commands = []*Command{
	infoCommand,
	dumpCommand,
	statCommand,
	serveCommand,
	tlsProxyCommand,
	sendCommand,
	getCommand,
	copyCommand,
	gatewayCommand,
	mcastCommand,
	benchCommand,
	pingpongCommand,
	rpingCommand,
	udaddyCommand,
	mckeyCommand,
	ucmatoseCommand,
	demoCommand,
	daemonCommand,
	versionCommand,
}

// UsageError is a mistake in the command line: an unknown subcommand or
// flag, a missing or malformed argument. The process exits with status 2.
type UsageError struct {
	Cmd string // "xdproce dump"
	Msg string
}

func (e *UsageError) Error() string {
	return e.Msg + " (run '" + e.Cmd + " -h' for help)"
}

func usageErrorf(cmd, format string, args ...any) error {
	return &UsageError{Cmd: cmd, Msg: fmt.Sprintf(format, args...)}
}

// ExitCode maps Run's result to a process exit status: 0 for nil (including
// -h), 2 for a *UsageError, 1 for any other error.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// Environment variables that give flag defaults.
const (
	envLogLevel = "XDPROCE_LOG_LEVEL"
)

// Run runs the xdproce command line args (without the program name), writing
// data to stdout and diagnostics to stderr. It returns nil on success and
// after printing help; a *UsageError for command-line mistakes; any other
// error for failures. Run does not print the returned error: the caller does
// (cmd/xdproce prints "xdproce: " + err and exits with ExitCode(err)).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xdproce", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	version := fs.Bool("version", false, "print the version and exit")
	level := logLevelFlag(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printMainHelp(stdout, fs)
			return nil
		}
		return usageErrorf("xdproce", "%v", err)
	}
	if *version {
		fmt.Fprintln(stdout, "xdproce", Version())
		return nil
	}
	rest := fs.Args()
	if len(rest) == 0 {
		printMainHelp(stderr, fs)
		return usageErrorf("xdproce", "no subcommand given")
	}
	name := rest[0]
	if name == "help" {
		if len(rest) == 1 || rest[1] == "-h" || rest[1] == "--help" || rest[1] == "-help" {
			printMainHelp(stdout, fs)
			return nil
		}
		c := lookup(rest[1])
		if c == nil {
			return usageErrorf("xdproce", "unknown subcommand %q for xdproce help", rest[1])
		}
		env := &Env{Stdout: stdout, Stderr: stderr, Log: slog.New(slog.DiscardHandler)}
		cfs, _ := newCommandFlags(c)
		c.Setup(cfs, env)
		printCommandHelp(stdout, c, cfs)
		return nil
	}
	c := lookup(name)
	if c == nil {
		return usageErrorf("xdproce", "unknown subcommand %q for xdproce", name)
	}
	env := &Env{Stdout: stdout, Stderr: stderr, Log: slog.New(slog.DiscardHandler)}
	cfs, clevel := newCommandFlags(c)
	run := c.Setup(cfs, env)
	flags, pos := interspersed(cfs, rest[1:])
	if err := cfs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, c, cfs)
			return nil
		}
		return usageErrorf("xdproce "+c.Name, "%v", err)
	}
	lv := level.level
	if clevel.set {
		lv = clevel.level
	}
	// Setup ran before the flags were parsed: commands read env.Log when they run.
	env.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	env.Log.Debug("running", "command", c.Name, "args", pos)
	return run(ctx, pos)
}

func lookup(name string) *Command {
	for _, c := range commands {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// newCommandFlags makes c's flag set with the flags every command shares.
func newCommandFlags(c *Command) (*flag.FlagSet, *logLevel) {
	fs := flag.NewFlagSet("xdproce "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs, logLevelFlag(fs)
}

// logLevel is the --log-level flag: debug, info, warn or error.
type logLevel struct {
	level slog.Level
	set   bool
}

func logLevelFlag(fs *flag.FlagSet) *logLevel {
	lv := &logLevel{level: slog.LevelWarn}
	if s := os.Getenv(envLogLevel); s != "" {
		if err := lv.level.UnmarshalText([]byte(s)); err != nil {
			lv.level = slog.LevelWarn
		}
	}
	fs.Var(lv, "log-level", "log `level` on stderr: debug, info, warn or error ($"+envLogLevel+")")
	return lv
}

func (l *logLevel) String() string {
	if l == nil {
		return "WARN"
	}
	return l.level.String()
}

func (l *logLevel) Set(s string) error {
	if err := l.level.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	l.set = true
	return nil
}

// interspersed splits args into flags (with their values) and positional
// arguments, so that flags may follow positional arguments. "--" ends the
// flags; "-" alone is positional. Unknown flags are kept with the flags, so
// that Parse reports them.
func interspersed(fs *flag.FlagSet, args []string) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return flags, pos
}

func printMainHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `USAGE
  xdproce [--version] [--log-level LEVEL] SUBCOMMAND [flags] [args]

xdproce is a software RoCEv2 (RDMA over Converged Ethernet) stack in Go over
AF_XDP. These subcommands inspect and drive it.

SUBCOMMANDS
`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.ShortHelp)
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "help", "show help for a subcommand")
	tw.Flush()
	fmt.Fprintln(w, "\nFLAGS")
	printFlags(w, fs)
	fmt.Fprint(w, `
EXIT STATUS
  0 success (and -h), 1 failure, 2 command-line mistake.

Run 'xdproce SUBCOMMAND -h' for a subcommand's flags and examples.
`)
}

func printCommandHelp(w io.Writer, c *Command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "USAGE\n  %s\n\n%s\n", c.ShortUsage, strings.TrimSpace(c.LongHelp))
	fmt.Fprintln(w, "\nFLAGS")
	printFlags(w, fs)
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	var all []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { all = append(all, f) })
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, f := range all {
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // the tools' single-letter flags, as their users write them
		}
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintln(w, line)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "        %s%s\n", usage, def)
	}
}
