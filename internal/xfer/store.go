package xfer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// The served directory. Every name a client gives is opened beneath Dir's
// os.Root: a symbolic link is followed while it stays inside Dir and
// refused when it leads out, on reads, writes, temporary files and renames
// alike.

// dirRoot returns the root of s.Dir: the one Serve opened, or a new one
// that release closes.
func (s *Server) dirRoot() (root *os.Root, release func(), err error) {
	if s.root != nil {
		return s.root, func() {}, nil
	}
	root, err = os.OpenRoot(s.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("served directory: %w", err)
	}
	return root, func() { root.Close() }, nil
}

// escapes reports whether err is os.Root refusing a path that leads out of
// the root (through ".." or a symbolic link).
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// openServed opens the file name of a get request for reading.
func openServed(root *os.Root, name string) (*os.File, error) {
	f, err := root.Open(name)
	switch {
	case err == nil:
		return f, nil
	case escapes(err):
		return nil, fmt.Errorf("%q leads outside the served directory (refused)", name)
	case errors.Is(err, fs.ErrNotExist):
		return nil, noFile(name)
	}
	return nil, fmt.Errorf("open %q: %w", name, err)
}

// startReceive opens the temporary file of a put request, or refuses the
// request with the reason. cleanup removes the file unless it was committed.
func (s *Server) startReceive(c *ctrl, req *message) (tmp *tempFile, cleanup func(), err error) {
	root, release, err := s.dirRoot()
	if err != nil {
		return nil, nil, refuse(c, err)
	}
	if tmp, err = s.receiveInto(root, req); err != nil {
		release()
		return nil, nil, refuse(c, err)
	}
	return tmp, func() {
		if !tmp.committed {
			tmp.discard()
		}
		release()
	}, nil
}

// receiveInto checks a put request against the served directory (name,
// size, an existing file, free space) and creates its temporary file.
func (s *Server) receiveInto(root *os.Root, req *message) (*tempFile, error) {
	if err := ValidName(req.Name); err != nil {
		return nil, err
	}
	if req.Size < 0 {
		return nil, fmt.Errorf("size %d", req.Size)
	}
	_, err := root.Lstat(req.Name)
	switch {
	case err == nil && !req.Force:
		return nil, fmt.Errorf("%q: %w on the server (send --force replaces it on a server run with --overwrite)", req.Name, ErrExists)
	case err == nil && !s.Overwrite:
		return nil, fmt.Errorf("%q: %w and this server does not replace files (serve --overwrite)", req.Name, ErrExists)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%q: %w", req.Name, err)
	}
	if free, ok := freeSpace(root); ok && req.Size > free {
		return nil, fmt.Errorf("not enough space on the server: %q needs %d bytes, %d free in its directory", req.Name, req.Size, free)
	}
	return createTempIn(root, req.Name)
}

// overwrite reports whether a put request may replace an existing file.
func (s *Server) overwrite(req *message) bool { return s.Overwrite && req.Force }
