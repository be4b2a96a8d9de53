package shm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/link/shm"
)

// childEnv, when set, makes the test binary the peer process of the
// cross-process tests instead of running tests; its value is the role. The
// unix socket to the parent is fd 3.
const childEnv = "XDPROCE_SHM_PEER"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, "shm peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child plays one role:
//   - "echo": attach the port it receives and send back every frame until
//     the parent goes;
//   - "hang": attach the port it receives, say so, and sleep;
//   - "create": create a port, pass its descriptors, say so, and sleep;
//   - "sink": attach the port it receives and count the frames, writing
//     the count to the parent at each frame starting with 0xff.
func child(role string) error {
	f := os.NewFile(3, "parent")
	fc, err := net.FileConn(f)
	if err != nil {
		return err
	}
	conn := fc.(*net.UnixConn)
	var l *shm.Link
	if role == "create" {
		var fds *shm.PortFds
		if l, fds, err = shm.NewPort(shm.Config{Ring: 32}); err != nil {
			return err
		}
		if err := shm.SendPort(conn, fds); err != nil {
			return err
		}
	} else {
		fds, err := shm.ReceivePort(conn)
		if err != nil {
			return err
		}
		if l, err = shm.Attach(fds); err != nil {
			return err
		}
	}
	switch role {
	case "sink":
		return sink(l, conn)
	case "echo":
	default:
		conn.Write([]byte("R"))
		time.Sleep(time.Minute)
		return errors.New("not killed within a minute")
	}
	frames := make([][]byte, 32)
	bufs := make([][]byte, 32)
	for {
		if err := l.Wait(-1); err != nil {
			if errors.Is(err, shm.ErrPeerGone) {
				return nil
			}
			return err
		}
		n, err := l.Receive(frames)
		if err != nil {
			return err
		}
		k := l.Alloc(bufs[:n])
		for i := range k {
			bufs[i] = bufs[i][:copy(bufs[i], frames[i])]
		}
		if err := l.Send(bufs[:k]); err != nil {
			return err
		}
	}
}

// sink counts the frames it receives until the parent goes, reading one
// byte of each; at a frame starting with 0xff it writes the count so far.
func sink(l *shm.Link, conn *net.UnixConn) error {
	frames := make([][]byte, 64)
	count, sum := 0, 0
	for {
		n, err := l.Receive(frames)
		if err != nil {
			return err
		}
		for _, f := range frames[:n] {
			count++
			sum += int(f[len(f)-1])
			if f[0] == 0xff {
				fmt.Fprintf(conn, "%d\n", count)
			}
		}
		if n == 0 {
			if err := l.Wait(-1); errors.Is(err, shm.ErrPeerGone) {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
}

// startChild re-executes the test binary in role, connected by a unix
// socket pair; it is killed at the end of the test.
func startChild(t testing.TB, role string) (*exec.Cmd, *net.UnixConn) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(sp[0]), "child"), os.NewFile(uintptr(sp[1]), "parent")
	defer theirs.Close()
	fc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	conn := fc.(*net.UnixConn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
	})
	return cmd, conn
}

// TestCrossProcessEcho: the port's descriptors go to another process over
// SCM_RIGHTS; frames of every size up to MaxFrame come back byte-exact.
func TestCrossProcessEcho(t *testing.T) {
	_, conn := startChild(t, "echo")
	d, fds, err := shm.NewPort(shm.Config{Ring: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := shm.SendPort(conn, fds); err != nil {
		t.Fatal(err)
	}
	if fds.Mem != -1 || fds.Live != -1 {
		t.Errorf("SendPort left this process's copies open: %+v", *fds)
	}
	max := d.Props().MaxFrame
	for i, size := range []int{14, 60, 64, 1000, 1514, 4096, max - 1, max} {
		sendN(t, d, i*100, 16, size)
		recvN(t, d, i*100, 16, size, 10*time.Second)
	}
	// Then a stream: 20000 frames of 1 KiB in windows of 16 (the echo's
	// last 16 frames are lent until its next Receive: a ring of 32 holds
	// them and the next window).
	for i := 0; i < 20000; i += 16 {
		sendN(t, d, i, 16, 1024)
		recvN(t, d, i, 16, 1024, 10*time.Second)
	}
	if st := d.Stats(); st.BadDescs+st.BadIndexes+st.Overflow != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestPeerKilled: the process at the other end of a port is killed with
// SIGKILL, whichever end it created; the survivor, asleep in Wait(-1), gets
// ErrPeerGone within a second.
func TestPeerKilled(t *testing.T) {
	for _, role := range []string{"hang", "create"} {
		t.Run(role, func(t *testing.T) {
			cmd, conn := startChild(t, role)
			var l *shm.Link
			if role == "hang" {
				d, fds, err := shm.NewPort(shm.Config{Ring: 16})
				if err != nil {
					t.Fatal(err)
				}
				l = d
				if err := shm.SendPort(conn, fds); err != nil {
					t.Fatal(err)
				}
			} else {
				fds, err := shm.ReceivePort(conn)
				if err != nil {
					t.Fatal(err)
				}
				if l, err = shm.Attach(fds); err != nil {
					t.Fatal(err)
				}
			}
			defer l.Close()
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); err != nil {
				t.Fatalf("peer not ready: %v", err)
			}
			// Still alive: a Wait times out with no error.
			if err := l.Wait(20 * time.Millisecond); err != nil {
				t.Fatalf("Wait with a live peer: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				// Wait may return early (a wake-up with nothing to receive):
				// wait again until it reports the peer gone.
				for {
					if err := l.Wait(-1); err != nil {
						done <- err
						return
					}
				}
			}()
			time.Sleep(20 * time.Millisecond)
			start := time.Now()
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, shm.ErrPeerGone) {
					t.Fatalf("Wait after the peer was killed: %v, want ErrPeerGone", err)
				}
				t.Logf("peer death seen %v after SIGKILL", time.Since(start))
			case <-time.After(2 * time.Second):
				l.Close()
				t.Fatal("Wait(-1) still blocked 2s after the peer was killed")
			}
			bufs := make([][]byte, 1)
			l.Alloc(bufs)
			if err := l.Send(bufs); !errors.Is(err, shm.ErrPeerGone) {
				t.Errorf("Send to a killed peer: %v", err)
			}
		})
	}
}

// TestReceivePortRefuses: a message that is not a port (no descriptors, the
// wrong number, a wrong payload) is refused and its descriptors closed.
func TestReceivePortRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		nfds    int
	}{
		{"no descriptors", []byte{1}, 0},
		{"three", []byte{1}, 3},
		{"five", []byte{1}, 5},
		{"wrong version", []byte{9}, 4},
		{"two bytes", []byte{1, 1}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(sp[0])
			f := os.NewFile(uintptr(sp[1]), "r")
			fc, _ := net.FileConn(f)
			f.Close()
			rc := fc.(*net.UnixConn)
			defer rc.Close()
			var fds []int
			for range tc.nfds {
				fd, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
				fds = append(fds, fd)
				defer unix.Close(fd)
			}
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			if err := unix.Sendmsg(sp[0], tc.payload, oob, nil, 0); err != nil {
				t.Fatal(err)
			}
			before := openFds(t)
			p, err := shm.ReceivePort(rc)
			if err == nil {
				p.Close()
				t.Fatal("ReceivePort accepted it")
			}
			t.Log(err)
			if after := openFds(t); after != before {
				t.Errorf("%d descriptors open after the refusal, %d before", after, before)
			}
		})
	}
}

func openFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
