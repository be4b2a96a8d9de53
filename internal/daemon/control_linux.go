package daemon

import (
	"encoding/json"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/roce/mr"
)

// maxRequest bounds one request from a client; a longer one is cut and
// then fails to parse.
const maxRequest = 4096

// control does what a client's request asks (proto.Request) and says how
// it went. A request it cannot read is refused, not fatal: a client's bad
// input harms only its own requests.
func (d *Daemon) control(c *client, msg []byte, fds []int) *proto.Reply {
	var r proto.Request
	if err := json.Unmarshal(msg, &r); err != nil {
		closeFDs(fds)
		return &proto.Reply{Error: "malformed request: " + err.Error()}
	}
	if r.Op == proto.OpRegMem {
		if len(fds) != 1 {
			closeFDs(fds)
			return &proto.Reply{Error: fmt.Sprintf("regmem: %d descriptors, want one memfd", len(fds))}
		}
		id, err := d.addRegion(c, fds[0])
		if err != nil {
			d.log.Info("client request refused", "client", c.id, "op", r.Op, "err", err)
			return &proto.Reply{Error: "regmem: " + err.Error()}
		}
		return &proto.Reply{Region: id}
	}
	closeFDs(fds) // only regmem passes one
	var err error
	switch r.Op {
	case proto.OpDeregMem:
		err = d.dropRegion(c, r.Region)
	case proto.OpPlaceKey:
		err = d.addKey(c, r.Region, r.RKey, r.PD, mr.Access(r.Access), r.VA, r.Off, r.Len)
	case proto.OpRevokeQP:
		err = d.revoke(c, r.QPN)
	case proto.OpConnQP:
		err = d.connectQP(c, r.QPN, r.GID, r.PeerQPN)
	case proto.OpDisconnQP:
		err = d.disconnectQP(c, r.QPN)
	case proto.OpListen:
		err = d.listen(c, r.ServiceID)
	case proto.OpUnlisten:
		err = d.unlisten(c, r.ServiceID)
	case proto.OpJoin:
		err = d.joinGroup(c, r.Group)
	case proto.OpLeave:
		err = d.leaveGroup(c, r.Group)
	default:
		return &proto.Reply{Error: "unknown request " + strconv.Quote(r.Op)}
	}
	if err != nil {
		d.log.Info("client request refused", "client", c.id, "op", r.Op, "err", err)
		return &proto.Reply{Error: err.Error()}
	}
	d.log.Debug("client request", "client", c.id, "op", r.Op, "service_id", r.ServiceID, "group", r.Group)
	return &proto.Reply{}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
