package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/xdproce/xdproce/cm"
	"github.com/xdproce/xdproce/internal/xfer"
)

// A reply is an HTTP error: its status and one line of text.
type reply struct {
	status int
	msg    string
	// size, for 416: the file's size (Content-Range: bytes */size); -1 when
	// unknown.
	size int64
}

func (r *reply) Error() string { return r.msg }

func replyf(status int, format string, args ...any) *reply {
	return &reply{status: status, msg: fmt.Sprintf(format, args...), size: -1}
}

// dialReply is the reply to a failed connection to the node.
func dialReply(node string, err error) *reply {
	switch {
	case errors.Is(err, cm.ErrCapability):
		return replyf(http.StatusNotImplemented, "the node cannot do this: %v", err)
	case errors.Is(err, cm.ErrAuth), errors.Is(err, cm.ErrFingerprintMismatch), errors.Is(err, cm.ErrTLSRequired),
		errors.Is(err, cm.ErrVersionMismatch):
		return replyf(http.StatusBadGateway, "node %s did not accept the gateway: %v", node, err)
	}
	return replyf(http.StatusBadGateway, "node %s unreachable: %v", node, err)
}

// transferReply is the reply to a transfer that failed before the response
// started. The node's coded refusals (xfer.RemoteError) map to their
// statuses; any other failure of the node or of the RDMA path is a 502.
func transferReply(err error) *reply {
	var re *xfer.RemoteError
	isRemote := errors.As(err, &re)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return replyf(http.StatusNotFound, "%s", re.Msg)
	case errors.Is(err, xfer.ErrExists):
		return replyf(http.StatusConflict, "%s; over HTTP: PUT /NAME?overwrite=1", re.Msg)
	case errors.Is(err, xfer.ErrRange):
		r := replyf(http.StatusRequestedRangeNotSatisfiable, "%s", re.Msg)
		r.size = re.Size
		return r
	case isRemote:
		return replyf(http.StatusBadGateway, "node refused: %s", re.Msg)
	}
	return replyf(http.StatusBadGateway, "transfer with the node failed: %v", err)
}

// write sends the reply: its status and its line.
func (r *reply) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.status == http.StatusRequestedRangeNotSatisfiable && r.size >= 0 {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", r.size))
	}
	w.WriteHeader(r.status)
	fmt.Fprintln(w, r.msg)
}
