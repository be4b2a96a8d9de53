package cli

// Packages that register capture payload describers, so that `xdproce dump`
// names their messages: enlarge (ENLARGE_REQ, ENLARGE_ACK, ENLARGE_CREDIT).
import _ "github.com/xdproce/xdproce/enlarge"
