package capture

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// FilterHelp documents the filter language (shown by `xdproce dump -h`).
const FilterHelp = `A filter is a list of terms that must all match, separated by "and" or ",":
  roce            any RoCEv2 frame (UDP port 4791)
  qpn=N           destination QP number (decimal or 0x hex)
  psn=N           packet sequence number
  op=NAME         opcode by name, case-insensitive, with * and ? wildcards
                  (op=RC_SEND_ONLY, op=rc_rdma_write_*, op=*READ*), or by number (op=0x0c)
  ack | nak | rnr an AETH of that type: ack = positive ACK, nak = NAK or RNR NAK,
                  rnr = RNR NAK only
  ooo             an OOO frame (opcodes 0xC0..0xC4: OOO_WRITE, OOO_READ_REQ,
                  OOO_COMPLETION, OOO_3P_*; also op=OOO_*)
  ctx=N           OOO context id (24 bits, either side: the frame's or its initiator's)
  tid=N           OOO transaction id
  bad             a RoCE frame that does not decode or has a bad ICRC
  dir=in|out      the direction recorded in the capture
  ip=ADDR         source or destination IP address; src=ADDR, dst=ADDR for one side
  not TERM, !TERM the term must not match
Frames that are not RoCEv2 never match a filter.`

// A Filter selects Records. The zero Filter and a nil *Filter match every
// frame (RoCE or not); a Filter with terms matches only RoCE frames.
type Filter struct {
	expr  string
	terms []term
}

type term struct {
	neg   bool
	match func(r *Record) bool
}

// ParseFilter parses expr (see FilterHelp). An empty expr gives a Filter
// that matches everything.
func ParseFilter(expr string) (*Filter, error) {
	f := &Filter{expr: expr}
	words := strings.Fields(strings.ReplaceAll(expr, ",", " , "))
	neg := false
	expectTerm := true
	for i, w := range words {
		lw := strings.ToLower(w)
		if lw == "and" || lw == "," {
			if expectTerm {
				return nil, fmt.Errorf("parse filter %q: %q without a term before it", expr, w)
			}
			expectTerm = true
			continue
		}
		if !expectTerm {
			return nil, fmt.Errorf("parse filter %q: missing \"and\" or \",\" before %q", expr, w)
		}
		if lw == "not" {
			neg = !neg
			continue
		}
		for strings.HasPrefix(lw, "!") {
			neg = !neg
			w, lw = w[1:], lw[1:]
		}
		if lw == "" {
			continue
		}
		m, err := parseTerm(w)
		if err != nil {
			return nil, fmt.Errorf("parse filter %q: term %d %q: %w", expr, i+1, w, err)
		}
		f.terms = append(f.terms, term{neg: neg, match: m})
		neg, expectTerm = false, false
	}
	if neg || (expectTerm && len(f.terms) > 0) {
		return nil, fmt.Errorf("parse filter %q: ends without a term", expr)
	}
	return f, nil
}

// String returns the expression the filter was parsed from.
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	return f.expr
}

// Empty reports whether the filter has no terms (matches everything).
func (f *Filter) Empty() bool { return f == nil || len(f.terms) == 0 }

// Match reports whether r passes the filter.
func (f *Filter) Match(r *Record) bool {
	if f.Empty() {
		return true
	}
	if !r.RoCE {
		return false
	}
	for _, t := range f.terms {
		if t.match(r) == t.neg {
			return false
		}
	}
	return true
}

func parseTerm(w string) (func(*Record) bool, error) {
	key, val, hasVal := strings.Cut(w, "=")
	key = strings.ToLower(key)
	needVal := func() error {
		if !hasVal || val == "" {
			return fmt.Errorf("%s needs a value (%s=…)", key, key)
		}
		return nil
	}
	noVal := func() error {
		if hasVal {
			return fmt.Errorf("%s takes no value", key)
		}
		return nil
	}
	switch key {
	case "roce":
		return func(r *Record) bool { return r.RoCE }, noVal()
	case "ooo":
		return func(r *Record) bool { return r.OOO != nil }, noVal()
	case "ctx", "tid":
		if err := needVal(); err != nil {
			return nil, err
		}
		n, err := strconv.ParseUint(val, 0, 32)
		if err != nil || key == "ctx" && n > 0xFFFFFF {
			return nil, fmt.Errorf("want a %s number (decimal or 0x hex)", map[string]string{"ctx": "24-bit", "tid": "32-bit"}[key])
		}
		v := uint32(n)
		if key == "tid" {
			return func(r *Record) bool { return r.OOO != nil && r.OOO.TID == v }, nil
		}
		return func(r *Record) bool {
			return r.OOO != nil && (r.OOO.CtxID == v || r.OOO.InitiatorID == v)
		}, nil
	case "bad":
		return func(r *Record) bool { return r.Bad() }, noVal()
	case "ack", "nak", "rnr":
		if err := noVal(); err != nil {
			return nil, err
		}
		want := map[string][]string{"ack": {"ACK"}, "nak": {"NAK", "RNR_NAK"}, "rnr": {"RNR_NAK"}}[key]
		return func(r *Record) bool {
			if r.AETH == nil {
				return false
			}
			for _, t := range want {
				if r.AETH.Type == t {
					return true
				}
			}
			return false
		}, nil
	case "qpn", "psn":
		if err := needVal(); err != nil {
			return nil, err
		}
		n, err := strconv.ParseUint(val, 0, 32)
		if err != nil || n > 0xFFFFFF {
			return nil, errors.New("want a 24-bit number (decimal or 0x hex)")
		}
		v := uint32(n)
		if key == "qpn" {
			return func(r *Record) bool { return r.BTH != nil && r.BTH.DestQPN == v }, nil
		}
		return func(r *Record) bool { return r.BTH != nil && r.BTH.PSN == v }, nil
	case "op", "opcode":
		if err := needVal(); err != nil {
			return nil, err
		}
		if n, err := strconv.ParseUint(val, 0, 8); err == nil {
			v := uint8(n)
			return func(r *Record) bool { return r.BTH != nil && r.BTH.OpcodeNum == v }, nil
		}
		pat := strings.ToUpper(val)
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("bad pattern: %w", err)
		}
		return func(r *Record) bool {
			if r.BTH == nil {
				return false
			}
			ok, _ := path.Match(pat, r.BTH.Opcode)
			return ok
		}, nil
	case "dir":
		if err := needVal(); err != nil {
			return nil, err
		}
		v := strings.ToLower(val)
		if v != "in" && v != "out" {
			return nil, errors.New("want dir=in or dir=out")
		}
		return func(r *Record) bool { return r.Dir == v }, nil
	case "ip", "src", "dst":
		if err := needVal(); err != nil {
			return nil, err
		}
		a, err := netip.ParseAddr(val)
		if err != nil {
			return nil, errors.New("want an IP address")
		}
		a = a.Unmap()
		src := func(r *Record) bool { return addrOf(r.Src) == a }
		dst := func(r *Record) bool { return addrOf(r.Dst) == a }
		switch key {
		case "src":
			return src, nil
		case "dst":
			return dst, nil
		}
		return func(r *Record) bool { return src(r) || dst(r) }, nil
	}
	return nil, errors.New("unknown term (want roce, qpn=, psn=, op=, ack, nak, rnr, ooo, ctx=, tid=, bad, dir=, ip=, src=, dst=)")
}

// addrOf returns the address of "a.b.c.d:port", "[v6]:port" or a bare address.
func addrOf(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(s)
	return a.Unmap()
}
