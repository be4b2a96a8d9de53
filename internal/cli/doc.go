// Package cli implements the xdproce command line: a table of subcommands,
// each with its own flags (stdlib flag, ContinueOnError, flags allowed before
// and after positional arguments), help text, and exit codes (0 success and
// -h, 1 failure, 2 usage error, see ExitCode). cmd/xdproce only calls Run.
//
// Adding a subcommand: write a *Command in its own file (Name, ShortUsage,
// ShortHelp, LongHelp ending with EXAMPLES, and Setup, which registers the
// flags on the FlagSet it is given and returns the function that runs the
// command) and add it to the commands table in cli.go. Every command gets
// --log-level. Return usageErrorf(...) for command-line mistakes (exit 2) and
// ordinary wrapped errors for failures (exit 1); Run's caller prints them.
// Write data to env.Stdout and diagnostics through env.Log (log/slog on
// stderr). Use Size (ParseSize: 4096, 64KiB, 1.5MiB) for byte-count flags and
// formatFlag for --format text|json|json-line.
package cli
