package wire

// PSNMask masks a 24-bit packet sequence number (also QPNs and MSNs).
const PSNMask = 0xFFFFFF

// PSNAdd returns a+n modulo 2^24.
func PSNAdd(a, n uint32) uint32 { return (a + n) & PSNMask }

// PSNDiff returns a-b as a signed distance in (-2^23, 2^23]: positive when a
// is after b in the 24-bit sequence space (IBA Vol 1, chapter 9).
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// PSNBefore reports whether a comes before b.
func PSNBefore(a, b uint32) bool { return PSNDiff(a, b) < 0 }

// PSNInWindow reports whether psn is one of the n PSNs starting at start
// (start, start+1, ..., start+n-1, modulo 2^24).
func PSNInWindow(psn, start, n uint32) bool { return (psn-start)&PSNMask < n }
