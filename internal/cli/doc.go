// Package cli implements the xdproce command line: a table of subcommands,
// each with its own flags (stdlib flag, ContinueOnError, flags allowed before
// and after positional arguments), help text, and exit codes (0 success and
// -h, 1 failure, 2 usage error, see ExitCode). cmd/xdproce only calls Run.
package cli
