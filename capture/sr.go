package capture

import (
	"strconv"

	"github.com/xdproce/xdproce/roce/wire"
)

// SACKRecord is what an SR_SACK says (docs/sr-wire.md): every PSN before
// Missing is acknowledged, Missing is not there, and the ranges in Held
// (inclusive, PSN order) are held by the responder past it.
type SACKRecord struct {
	Missing uint32     `json:"missing"`
	Held    []PSNRange `json:"held,omitempty"`
}

// PSNRange is PSNs First..Last inclusive.
type PSNRange struct {
	First uint32 `json:"first"`
	Last  uint32 `json:"last"`
}

func describeSACK(p *wire.Packet) *SACKRecord {
	s := &SACKRecord{Missing: p.BTH.PSN}
	psn := wire.PSNAdd(p.BTH.PSN, 1)
	for j := 0; j < 8*len(p.Payload); j++ {
		if p.Payload[j/8]&(1<<(j%8)) != 0 {
			if n := len(s.Held); n > 0 && wire.PSNAdd(s.Held[n-1].Last, 1) == psn {
				s.Held[n-1].Last = psn
			} else {
				s.Held = append(s.Held, PSNRange{psn, psn})
			}
		}
		psn = wire.PSNAdd(psn, 1)
	}
	return s
}

// appendSACK appends " sack missing 0x001000 held 0x001001-0x001003,0x001005".
func appendSACK(b []byte, s *SACKRecord) []byte {
	b = append(b, " sack missing "...)
	b = appendHex(b, uint64(s.Missing), 6)
	if len(s.Held) > 0 {
		b = append(b, " held "...)
	}
	for i, r := range s.Held {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendHex(b, uint64(r.First), 6)
		if r.Last != r.First {
			b = append(b, '-')
			b = appendHex(b, uint64(r.Last), 6)
		}
	}
	b = append(b, " ("...)
	b = strconv.AppendInt(b, int64(heldCount(s)), 10)
	return append(b, " held)"...)
}

func heldCount(s *SACKRecord) int {
	n := 0
	for _, r := range s.Held {
		n += int(wire.PSNDiff(r.Last, r.First)) + 1
	}
	return n
}
