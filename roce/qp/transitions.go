package qp

// transitions lists, per queue pair type, the attributes a transition
// requires and allows (ibverbs' qp_state_table, without P_Key index, port
// and alternate path; UD may also set PathMTU, its message size limit).
type transition struct{ req, opt AttrMask }

func transitionFor(t Type, cur, next State) (transition, bool) {
	if next == Reset || next == Error {
		return transition{}, true
	}
	if t == OOO {
		return oooTransition(cur, next)
	}
	switch {
	case cur == Reset && next == Init:
		if t == UD {
			return transition{req: AttrQKey, opt: AttrPathMTU}, true
		}
		return transition{opt: AttrAccessFlags}, true
	case cur == Init && next == Init:
		if t == UD {
			return transition{opt: AttrQKey | AttrPathMTU}, true
		}
		return transition{opt: AttrAccessFlags}, true
	case cur == Init && next == RTR:
		switch t {
		case RC:
			return transition{req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
				opt: AttrAccessFlags | AttrSelectiveRepeat | AttrDCQCN}, true
		case UC:
			return transition{req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, opt: AttrAccessFlags}, true
		}
		return transition{opt: AttrQKey | AttrPathMTU}, true
	case cur == RTR && next == RTS:
		switch t {
		case RC:
			return transition{req: AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic,
				opt: AttrAccessFlags | AttrMinRNRTimer | AttrSendWindow}, true
		case UC:
			return transition{req: AttrSQPSN, opt: AttrAccessFlags}, true
		}
		return transition{req: AttrSQPSN, opt: AttrQKey}, true
	case cur == RTS && next == RTS:
		switch t {
		case RC:
			return transition{opt: AttrAccessFlags | AttrMinRNRTimer | AttrTimeout | AttrRetryCnt | AttrRNRRetry}, true
		case UC:
			return transition{opt: AttrAccessFlags}, true
		}
		return transition{opt: AttrQKey}, true
	}
	return transition{}, false
}

// oooTransition is transitionFor of an OOO queue pair: connected like UC
// (RTR needs the address vector, the path MTU, whose size is the segment of
// its WRITEs, and the peer's QPN). It also takes, and ignores, the RC
// attributes roce's Connect passes (PSNs, timers, READ limits), which mean
// nothing without sequence numbers and retransmission.
func oooTransition(cur, next State) (transition, bool) {
	const ignored = AttrRQPSN | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic |
		AttrMaxDestRdAtomic | AttrMinRNRTimer
	switch {
	case cur == Reset && next == Init, cur == Init && next == Init, cur == RTS && next == RTS:
		return transition{opt: AttrAccessFlags}, true
	case cur == Init && next == RTR:
		return transition{req: AttrAV | AttrPathMTU | AttrDestQPN, opt: AttrAccessFlags | ignored}, true
	case cur == RTR && next == RTS:
		return transition{opt: AttrAccessFlags | ignored}, true
	}
	return transition{}, false
}
