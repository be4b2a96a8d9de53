package cli

import (
	"runtime"
	"testing"
)

// TestEngineProcs checks that opening devices adds a P per engine and one
// more to the runtime's default, that closing them gives the Ps back, and
// that a GOMAXPROCS the user set is left alone.
func TestEngineProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	def := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(def) })

	n1, rel1 := engineProcs(0) // 0: one engine, as the flag's default
	if want := def + 2; n1 != want || runtime.GOMAXPROCS(0) != want {
		t.Fatalf("one device, one engine: engineProcs %d, GOMAXPROCS %d, want %d", n1, runtime.GOMAXPROCS(0), want)
	}
	n2, rel2 := engineProcs(3)
	if want := def + 1 + 3 + 1; n2 != want || runtime.GOMAXPROCS(0) != want {
		t.Fatalf("a second device of 3 engines: engineProcs %d, GOMAXPROCS %d, want %d", n2, runtime.GOMAXPROCS(0), want)
	}
	rel1()
	rel1() // twice: counted once
	if want := def + 3 + 1; runtime.GOMAXPROCS(0) != want {
		t.Fatalf("after the first device closed: GOMAXPROCS %d, want %d", runtime.GOMAXPROCS(0), want)
	}
	rel2()
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Fatalf("after both closed: GOMAXPROCS %d, want the default %d", got, def)
	}

	t.Setenv("GOMAXPROCS", "1")
	n, rel := engineProcs(2)
	rel()
	if n != 0 || runtime.GOMAXPROCS(0) != def {
		t.Fatalf("with GOMAXPROCS set: engineProcs %d, GOMAXPROCS %d; want 0 and %d untouched", n, runtime.GOMAXPROCS(0), def)
	}
}
