package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDumpAMLargeWrite: dump --verify passes on the active-message golden
// capture and names its messages (am's describer is registered through the
// import in describers.go).
func TestDumpAMLargeWrite(t *testing.T) {
	path := filepath.Join(goldenDir, "am-large-write.pcapng")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("am golden capture missing: %v", err)
	}
	out, errOut, err := run(t, "dump", "--verify", path)
	if err != nil {
		t.Fatalf("dump --verify: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "0 with a bad ICRC, 0 that do not decode") {
		t.Errorf("verify summary: %q", errOut)
	}
	for _, want := range []string{"RC_SEND_ONLY", "[AM_WRITE_RTS tag=1 win=7 off=0x3e8 len=3000 addr=0x", "[AM_DONE tag=1 win=7"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
	js, _, err := run(t, "dump", "--json", path)
	if err != nil || !strings.Contains(js, `"payload_kind":"am"`) {
		t.Errorf("JSON lacks payload_kind am: %v", err)
	}
}
