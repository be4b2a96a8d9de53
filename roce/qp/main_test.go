package qp

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when tests leave goroutines behind (the signal
// handler the fuzzing engine starts is not counted).
func TestMain(m *testing.M) {
	before := goroutines()
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(2 * time.Second)
		for len(goroutines()) > len(before) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if after := goroutines(); len(after) > len(before) {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %d before, %d after:\n%s\n", len(before), len(after),
				strings.Join(after, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "os/signal.") || strings.Contains(g, "qp.goroutines(") {
			continue
		}
		out = append(out, g)
	}
	return out
}
