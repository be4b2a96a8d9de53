package roce_test

import (
	"os"
	"strings"
	"testing"
)

// writeToPeer (example_readme_test.go) is compiled, not run: it needs eth1
// and a peer.
var _ = writeToPeer

// TestReadmeGoAPI: the README's Go API block is example_readme_test.go after
// its import block, so the README's code compiles as written.
func TestReadmeGoAPI(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## The Go API\n")
	if !ok {
		t.Fatal(`README.md has no "## The Go API" section`)
	}
	before, block, ok := strings.Cut(section, "\n```go\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed || strings.Contains(before, "\n## ") {
		t.Fatal("the README's Go API section has no ```go block")
	}
	_, body, ok := strings.Cut(string(src), "\n)\n\n")
	if !ok {
		t.Fatal("example_readme_test.go has no import block")
	}
	if block+"\n" != body {
		t.Errorf("the README's Go API block differs from example_readme_test.go after its imports:\nREADME:\n%s\nfile:\n%s", block, body)
	}
}
