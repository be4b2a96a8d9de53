package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"
)

// errBudget marks a run that outlived its budget.
var errBudget = errors.New("run budget exceeded")

// budgetBase is the part of a run's budget that does not scale with it:
// the tools' set-up after the connection (a slow guest's rxe takes seconds).
const budgetBase = 30 * time.Second

// runBudget is how long a bench or pingpong run may take once its
// connection is made: base (0: budgetBase), and per message 1 ms plus its
// bytes at 10 MB/s (what rxe in the interop suite's TCG guest moves). Two
// xdproce ends agree on their parameters first, but a stock peer (perftest,
// ibv_rc_pingpong) given other ones would leave a side waiting for
// completions that never come; the budget turns that into an error.
func runBudget(base time.Duration, size, iters, qps int) time.Duration {
	if base == 0 {
		base = budgetBase
	}
	per := time.Millisecond + time.Duration(float64(size)/10e6*float64(time.Second))
	return base + time.Duration(iters)*time.Duration(qps)*per
}

// withBudget bounds ctx by the run's budget; when it ends the run, the
// context's cause says what ran out and why that usually happens.
func withBudget(ctx context.Context, base time.Duration, size, iters, qps int) (context.Context, context.CancelFunc) {
	d := runBudget(base, size, iters, qps)
	cause := fmt.Errorf("%w: no result within %v, the time allowed for %d × %d B on %d queue pair(s) (does the peer run the same test with the same size and iterations?)",
		errBudget, d.Round(time.Second), iters, size, qps)
	return context.WithTimeoutCause(ctx, d, cause)
}

// budgetErr gives the budget's own error when the budget ended the run.
func budgetErr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); err != nil && errors.Is(c, errBudget) {
		return c
	}
	return err
}

// explicitFlags lists the parameters given on the command line: names maps
// each flag name (and its perftest-style alias) to the parameter.
func explicitFlags(fs *flag.FlagSet, names map[string]string) []string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if p, ok := names[f.Name]; ok && !slices.Contains(set, p) {
			set = append(set, p)
		}
	})
	slices.Sort(set)
	return set
}
