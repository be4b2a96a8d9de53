package cli

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// sizeUnits maps suffixes to multipliers. Binary units (KiB, MiB, GiB, TiB
// and the shorthands K, M, G, T) are powers of 1024; SI units (kB, KB, MB, GB,
// TB) are powers of 1000. Matching is case-insensitive except that "b" alone
// means bytes.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a byte count: a number with an optional unit, such as
// 4096, 64KiB, 64k, 1MiB, 2GiB, 1.5MiB or 10MB. Binary units (KiB, MiB, GiB,
// TiB; K, M, G, T) count 1024s, SI units (kB, MB, GB, TB) count 1000s. A
// fraction is allowed when the result is a whole number of bytes (1.5MiB is
// 1572864; 1.3B is an error). Negative sizes and sizes above 2^63-1 are errors.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("parse size: empty")
	}
	num, mult := t, int64(1)
	lower := strings.ToLower(t)
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	if num == "" || num[0] == '-' || num[0] == '+' {
		return 0, fmt.Errorf("parse size %q: want a non-negative number with an optional unit (4096, 64KiB, 1.5MiB)", s)
	}
	if !strings.ContainsAny(num, ".eE") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse size %q: want a non-negative number with an optional unit (4096, 64KiB, 1.5MiB)", s)
		}
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("parse size %q: too large", s)
		}
		return n * mult, nil
	}
	// Exact decimal arithmetic, so that 1.5MiB is exact and 0.1B is refused.
	r, ok := new(big.Rat).SetString(num)
	if !ok || strings.ContainsAny(num, "eE") {
		return 0, fmt.Errorf("parse size %q: want a non-negative number with an optional unit (4096, 64KiB, 1.5MiB)", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("parse size %q: not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("parse size %q: too large", s)
	}
	return r.Num().Int64(), nil
}

// FormatSize writes n with the largest binary unit that divides it exactly:
// 4096 → "4KiB", 1572864 → "1536KiB", 1000 → "1000".
func FormatSize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	u := ""
	for i := 0; i < len(units) && n != 0 && n%1024 == 0; i++ {
		n /= 1024
		u = units[i]
	}
	return strconv.FormatInt(n, 10) + u
}

// Size is a flag.Value holding a byte count parsed by ParseSize.
type Size int64

func (s *Size) String() string {
	if s == nil {
		return "0"
	}
	return FormatSize(int64(*s))
}

func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}
