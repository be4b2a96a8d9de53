package wire

import "strconv"

// MTU is the InfiniBand path MTU enum (the values of ibv_mtu / enum ib_mtu).
// The zero value is invalid.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of the MTU, or 0 if m is not valid.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of MTU256..MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

func (m MTU) String() string {
	if m.Valid() {
		return "MTU" + strconv.Itoa(m.Bytes())
	}
	return "MTU(" + strconv.Itoa(int(m)) + ")"
}

// MTUFromBytes returns the MTU of exactly n bytes (256, 512, 1024, 2048 or
// 4096), or 0 when n is none of them.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// RoCEOverhead is what rxe subtracts from the link MTU to get the largest
// payload it may use (RXE_MAX_HDR_LENGTH): IPv6 40 + UDP 8 + BTH 12 + RETH 16
// + ICRC 4.
const RoCEOverhead = 80

// PathMTU returns the largest MTU whose payload plus RoCEOverhead fits in an
// L3 link MTU (rxe's active MTU; 1500 gives MTU1024, 9000 gives MTU4096), or 0
// when even 256 bytes do not fit.
func PathMTU(linkMTU int) MTU {
	best := MTU(0)
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() <= linkMTU-RoCEOverhead {
			best = m
		}
	}
	return best
}
