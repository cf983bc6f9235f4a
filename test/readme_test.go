package test

import (
	"os"
	"strings"
	"testing"

	"github.com/sg-project/sg/messages"
)

const (
	codesBegin = "<!-- codes:begin (generated from messages.CodesMarkdown; a test keeps it true) -->"
	codesEnd   = "<!-- codes:end -->"
)

// The README's table of return codes is the code's own table. Run with
// SG_UPDATE_README=1 to rewrite it.
func TestREADMECodesTable(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, codesBegin), strings.Index(s, codesEnd)
	if i < 0 || j < i {
		t.Fatal("README.md lacks the codes markers")
	}
	want := codesBegin + "\n" + messages.CodesMarkdown() + codesEnd
	got := s[i : j+len(codesEnd)]
	if got == want {
		return
	}
	if os.Getenv("SG_UPDATE_README") != "" {
		if err := os.WriteFile("../README.md", []byte(s[:i]+want+s[j+len(codesEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's codes table differs from messages.CodesMarkdown(); run SG_UPDATE_README=1 go test ./test -run READMECodes")
}
