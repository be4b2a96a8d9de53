package cli

// Packages that register capture payload describers, so that `xdproce dump`
// names their messages: enlarge (ENLARGE_REQ, ENLARGE_ACK, ENLARGE_CREDIT)
// and cm/rdmacm (the CM MADs on QP1: REQ, REP, RTU, DREQ, …).
import (
	_ "github.com/xdproce/xdproce/cm/rdmacm"
	_ "github.com/xdproce/xdproce/enlarge"
)
