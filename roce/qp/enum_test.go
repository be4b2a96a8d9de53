package qp

import (
	"strings"
	"testing"
)

// TestEnumNames keeps the hand-written name tables in step with the enums:
// every value up to the last has its own name, and the value after the last
// falls back to "Type(n)".
func TestEnumNames(t *testing.T) {
	check := func(typ string, first, last int, name func(int) string) {
		seen := map[string]bool{}
		for v := first; v <= last; v++ {
			n := name(v)
			if strings.HasPrefix(n, typ+"(") || seen[n] {
				t.Errorf("%s(%d) = %q: missing or repeated name", typ, v, n)
			}
			seen[n] = true
		}
		if n := name(last + 1); !strings.HasPrefix(n, typ+"(") {
			t.Errorf("%s(%d) = %q: the table has more names than the enum", typ, last+1, n)
		}
	}
	check("Type", int(RC), int(OOO), func(v int) string { return Type(v).String() })
	check("State", int(Reset), int(Error), func(v int) string { return State(v).String() })
	check("WCStatus", int(WCSuccess), int(WCGeneralErr), func(v int) string { return WCStatus(v).String() })
	check("WCOpcode", int(WCSend), int(WCBindMW), func(v int) string { return WCOpcode(v).String() })
	check("WROpcode", int(WRRDMAWrite), int(WRBindMW), func(v int) string { return WROpcode(v).String() })
	check("Counter", int(CtrRetransmits), int(numCounters)-1, func(v int) string { return Counter(v).String() })
	check("reqState", int(reqGetWQE), int(reqDone), func(v int) string { return reqState(v).String() })
	check("compState", int(compCheckPSN), int(compDone), func(v int) string { return compState(v).String() })
	check("respState", int(respCheckPSN), int(respDone), func(v int) string { return respState(v).String() })
	if got := AttrMask(AttrState | AttrDestQPN | 1<<20).String(); got != "STATE|DEST_QPN|0x100000" {
		t.Errorf("AttrMask.String() = %q", got)
	}
	for s, want := range map[WCStatus]string{WCSuccess: "IBV_WC_SUCCESS", WCRetryExcErr: "IBV_WC_RETRY_EXC_ERR",
		WCRNRRetryExcErr: "IBV_WC_RNR_RETRY_EXC_ERR", WCWRFlushErr: "IBV_WC_WR_FLUSH_ERR", WCRemAccessErr: "IBV_WC_REM_ACCESS_ERR"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
	// ibverbs values (enum ibv_wc_status).
	if WCRetryExcErr != 12 || WCRNRRetryExcErr != 13 || WCWRFlushErr != 5 || WCRemAccessErr != 10 || WCGeneralErr != 21 {
		t.Error("WCStatus values differ from ibverbs")
	}
}
