package gateway

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xdproce/xdproce/internal/xfer"
)

// parseRange reads a Range header (RFC 9110 §14.2) of one byte range:
// "bytes=A-B", "bytes=A-" or "bytes=-N". It returns nil for a header to
// ignore, as RFC 9110 lets a server: a malformed one, another unit, or
// several ranges (the whole file is sent then). unsatisfiable is set for
// "bytes=-0".
func parseRange(h string) (sp *xfer.Span, unsatisfiable bool) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return nil, false
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return nil, false
	}
	num := func(s string) (int64, bool) {
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil && n >= 0 && s != "" && s[0] != '+'
	}
	if first == "" {
		n, ok := num(last)
		switch {
		case !ok:
			return nil, false
		case n == 0:
			return nil, true
		}
		return &xfer.Span{From: -n}, false
	}
	a, ok := num(first)
	if !ok {
		return nil, false
	}
	if last == "" {
		return &xfer.Span{From: a}, false
	}
	b, ok := num(last)
	if !ok || b < a {
		return nil, false
	}
	if b-a+1 <= 0 { // b = MaxInt64 with a = 0
		return &xfer.Span{From: a}, false
	}
	return &xfer.Span{From: a, Count: b - a + 1}, false
}

// contentRange is the Content-Range of a resolved span.
func contentRange(sp xfer.Span) string {
	return fmt.Sprintf("bytes %d-%d/%d", sp.From, sp.From+sp.Count-1, sp.Total)
}
