package cli

// Packages that register capture payload describers, so that `xdproce dump`
// names their messages: am (AM_WRITE, AM_WRITE_RTS, AM_READ, AM_READ_REPLY,
// AM_DONE, AM_NAK), enlarge (ENLARGE_REQ, ENLARGE_ACK, ENLARGE_CREDIT), lmrm
// (LMRM_ALLOC, LMRM_ALLOC_ACK, LMRM_RELEASE, LMRM_REVOKE) and
// cm/rdmacm (the CM MADs on QP1: REQ, REP, RTU, DREQ, …).
import (
	_ "github.com/xdproce/xdproce/am"
	_ "github.com/xdproce/xdproce/cm/rdmacm"
	_ "github.com/xdproce/xdproce/enlarge"
	_ "github.com/xdproce/xdproce/lmrm"
)
