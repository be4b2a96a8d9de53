package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"sync/atomic"
)

// RecoverIPv4ID finds the IPv4 Identification that makes the ICRC of an IPv4
// RoCEv2 frame right, when that field is the only thing wrong with it.
//
// This is for links that rebuild the headers of received frames (link/udp:
// kernel UDP sockets hide the received IPv4 header, so the link writes
// Identification 0). The ICRC covers the Identification (ROCEV2.md), so a
// frame from a peer with a non-zero IP ID, such as Linux rxe, then fails its
// ICRC although it is intact. CRC-32 is affine over GF(2): for equal lengths,
// crc(m ⊕ d) ⊕ crc(m) is crc0(d), the CRC with zero initial value and no final
// inversion, and changing the Identification by x changes the hashed bytes by
// x at its offset and zeros after it, so the mismatch must equal
// crc0(x)·X^(8N) mod P — linear in the 16 bits of x. A 16-column elimination
// solves for x. A random corruption is explained by some x with probability
// about 2^-16, so this weakens corruption detection on such links by that much.
//
// ok is false when the frame is not IPv4 RoCEv2, is malformed, or when no
// Identification explains the mismatch. A frame whose ICRC is already right
// gives its own Identification. RecoverIPv4ID does not allocate.
func RecoverIPv4ID(frame []byte) (id uint16, ok bool) {
	return RecoverIPv4IDGuess(frame, 0)
}

// RecoverIPv4IDGuess is RecoverIPv4ID trying guess first, which costs one
// multiplication instead of the elimination (sixteen): for a segment of a
// coalesced UDP_SEGMENT message the sender's Identification is usually the
// segment's index in it.
func RecoverIPv4IDGuess(frame []byte, guess uint16) (id uint16, ok bool) {
	return recoverIPv4ID(frame, guess, false)
}

// RecoverIPv4IDGuessInPlace is RecoverIPv4IDGuess hashing the frame in place,
// as SetICRC does (the 8 bytes before the IP header and the variant fields
// are overwritten during the call and restored before it returns, so frame
// must not be read or written concurrently): the headers go through the
// same pass as the payload instead of a copy hashed by table (link/udp's
// receive path, where the headers' table pass was 4.5 % of the receiver's
// CPU).
func RecoverIPv4IDGuessInPlace(frame []byte, guess uint16) (id uint16, ok bool) {
	return recoverIPv4ID(frame, guess, true)
}

func recoverIPv4ID(frame []byte, guess uint16, inPlace bool) (id uint16, ok bool) {
	ip, end, ok := ipv4Span(frame)
	if !ok {
		return 0, false
	}
	var want uint32
	if inPlace {
		ipOff, ipLen, _, v6, err := locate(frame[:end])
		if err != nil || v6 || ipOff != ip {
			return 0, false
		}
		want = icrcInPlace(frame[ipOff-8:end-ICRCLen], ipLen, false)
	} else {
		var err error
		if want, err = ComputeICRC(frame[:end]); err != nil {
			return 0, false
		}
	}
	cur := binary.BigEndian.Uint16(frame[ip+4:])
	delta := want ^ binary.LittleEndian.Uint32(frame[end-ICRCLen:])
	if delta == 0 {
		return cur, true
	}
	// Bytes hashed after the Identification field (the ICRC is not hashed).
	n := uint64(end - ICRCLen - (ip + 6))
	if guess != cur && idDelta(n, cur^guess) == delta {
		return guess, true
	}
	var cols idColumns
	columnsFor(n, &cols)
	// Elimination rows keyed by their top bit, each with the set of ID bits
	// it combines.
	var rows [32]uint32
	var masks [32]uint16
	for i, v := range cols {
		m := uint16(1) << i
		for v != 0 {
			hb := 31 - bits.LeadingZeros32(v)
			if rows[hb] == 0 {
				rows[hb], masks[hb] = v, m
				break
			}
			v ^= rows[hb]
			m ^= masks[hb]
		}
	}
	var x uint16
	for delta != 0 {
		hb := 31 - bits.LeadingZeros32(delta)
		if rows[hb] == 0 {
			return 0, false
		}
		delta ^= rows[hb]
		x ^= masks[hb]
	}
	return cur ^ x, true
}

// ChangeIPv4ID writes id into the Identification field of an IPv4 RoCEv2
// frame (and its header checksum) and, when the frame's ICRC was right,
// changes the ICRC so that it is right for id. This is for links whose kernel
// writes an Identification of its own (link/udp with UDP_SEGMENT: segment k
// leaves with Identification k). The check costs one CRC pass over the frame;
// the update does not hash again (the CRC is linear in the Identification, as
// RecoverIPv4ID explains). A frame whose ICRC is wrong, or that is no RoCEv2
// frame, gets id and keeps its bytes otherwise, so it arrives as sent.
//
// ok is false when frame is not IPv4 with room for UDP, BTH and ICRC (then it
// is unchanged); icrcOK reports whether the ICRC was right before. It does
// not allocate and is safe for concurrent use on distinct frames.
func ChangeIPv4ID(frame []byte, id uint16) (icrcOK, ok bool) {
	ip, end, ok := ipv4Span(frame)
	if !ok {
		return false, false
	}
	cur := binary.BigEndian.Uint16(frame[ip+4:])
	if cur == id {
		return false, true // nothing hashed changes
	}
	want, err := ComputeICRC(frame[:end])
	if err != nil {
		return false, false
	}
	if want != binary.LittleEndian.Uint32(frame[end-ICRCLen:]) {
		SetIPv4ID(frame, id)
		return false, true
	}
	return true, MoveIPv4ID(frame, id)
}

// MoveIPv4ID writes id into the Identification field of an IPv4 RoCEv2
// frame (and its header checksum) and moves its ICRC by what the change
// alone does to the CRC, without hashing the frame: the CRC is affine in the
// frame's bits, so a right ICRC becomes the right one for id and a wrong one
// stays wrong by exactly the same error (the peer still refuses it). This is
// ChangeIPv4ID for a sender that does not need to know whether the ICRC was
// right: link/udp moves every frame of a UDP_SEGMENT message to its
// segment's Identification, and a pass over each frame to check an ICRC the
// engine has just computed cost about a tenth of the sender's CPU.
//
// It reports false, and leaves frame unchanged, when frame is not IPv4 with
// room for UDP, BTH and ICRC. It does not allocate and is safe for
// concurrent use on distinct frames.
func MoveIPv4ID(frame []byte, id uint16) bool {
	ip, end, ok := ipv4Span(frame)
	if !ok {
		return false
	}
	cur := binary.BigEndian.Uint16(frame[ip+4:])
	if cur == id {
		return true
	}
	SetIPv4ID(frame, id)
	slot := frame[end-ICRCLen:]
	n := uint64(end - ICRCLen - (ip + 6))
	binary.LittleEndian.PutUint32(slot, binary.LittleEndian.Uint32(slot)^idDelta(n, cur^id))
	return true
}

// lastShift caches X^(8n) mod P for the last n asked (n in the high 32 bits):
// frames of one size share it, and computing it costs about a microsecond.
var lastShift atomic.Uint64

func shiftAfterID(n uint64) uint32 {
	if c := lastShift.Load(); c>>32 == n && c != 0 {
		return uint32(c)
	}
	s := xPow8N(n)
	lastShift.Store(n<<32 | uint64(s))
	return s
}

// ipv4Span finds the IPv4 header of an RoCEv2 frame (after one optional
// 802.1Q/802.1ad tag) and the end of its IP packet.
func ipv4Span(frame []byte) (ip, end int, ok bool) {
	ip = ethLen
	if len(frame) < ip+ipv4Len {
		return 0, 0, false
	}
	et := binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 || et == 0x88a8 {
		ip += 4
		if len(frame) < ip+ipv4Len {
			return 0, 0, false
		}
		et = binary.BigEndian.Uint16(frame[ip-2:])
	}
	if et != 0x0800 || frame[ip]>>4 != 4 {
		return 0, 0, false
	}
	end = ip + int(binary.BigEndian.Uint16(frame[ip+2:]))
	if end > len(frame) || end < ip+int(frame[ip]&0x0f)*4+udpLen+BTHLen+ICRCLen {
		return 0, 0, false
	}
	return ip, end, true
}

// SetIPv4ID writes id into the Identification field of an IPv4 frame (after
// an optional 802.1Q tag) and recomputes the IPv4 header checksum.
func SetIPv4ID(frame []byte, id uint16) bool {
	ip := ethLen
	if len(frame) >= ip && (binary.BigEndian.Uint16(frame[12:]) == 0x8100 || binary.BigEndian.Uint16(frame[12:]) == 0x88a8) {
		ip += 4
	}
	if len(frame) < ip+ipv4Len || frame[ip]>>4 != 4 {
		return false
	}
	ihl := int(frame[ip]&0x0f) * 4
	if ihl < ipv4Len || len(frame) < ip+ihl {
		return false
	}
	binary.BigEndian.PutUint16(frame[ip+4:], id)
	frame[ip+10], frame[ip+11] = 0, 0
	binary.BigEndian.PutUint16(frame[ip+10:], IPv4Checksum(frame[ip:ip+ihl]))
	return true
}

// idBasis[i] is crc0 of the two Identification bytes with only bit i set.
var idBasis = func() (b [16]uint32) {
	zero := crc32.ChecksumIEEE([]byte{0, 0})
	for i := range b {
		var m [2]byte
		binary.BigEndian.PutUint16(m[:], 1<<i)
		b[i] = crc32.ChecksumIEEE(m[:]) ^ zero
	}
	return b
}()

// x2n[k] is X^(2^k) mod P in the reflected representation.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // X^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// multModP returns a·b mod P (reflected polynomials, bit 31 = X^0).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crc32.IEEE
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8N returns X^(8n) mod P.
func xPow8N(n uint64) uint32 {
	p := uint32(1) << 31 // X^0
	k := 3
	for n != 0 {
		if n&1 != 0 {
			p = multModP(x2n[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}
