package messages

import (
	"strings"
	"testing"
)

func TestCodesTable(t *testing.T) {
	// The seed's values must not move: clients compare numbers.
	seed := map[string]Code{"OK": 0, "APP": 5, "ERR": 10, "NOT_SUPPORTED": 12, "TIMEOUT": 45}
	for name, v := range seed {
		c, err := ParseCode(name)
		if err != nil || c != v {
			t.Errorf("ParseCode(%q) = %d, %v; want %d", name, c, err, v)
		}
	}
	names := map[string]bool{}
	prev := -1
	for _, ci := range codeTable {
		if int(ci.Code) <= prev {
			t.Errorf("code table not in ascending order at %s", ci.Name)
		}
		prev = int(ci.Code)
		if names[ci.Name] {
			t.Errorf("duplicate name %s", ci.Name)
		}
		names[ci.Name] = true
		if ci.Code.String() != ci.Name || ci.Description == "" || ci.Code.Description() != ci.Description || !ci.Code.Known() {
			t.Errorf("code %d: inconsistent table row %+v", ci.Code, ci)
		}
		if c, err := ParseCode(strings.ToLower(ci.Name)); err != nil || c != ci.Code {
			t.Errorf("ParseCode(lower %s) = %v, %v", ci.Name, c, err)
		}
	}
	if got := Code(999).String(); got != "CODE_999" {
		t.Errorf("unknown code prints %q", got)
	}
	if c, err := ParseCode("999"); err != nil || c != 999 {
		t.Errorf("ParseCode(999) = %v, %v", c, err)
	}
	for _, bad := range []string{"", "NOPE", "-1", "65536"} {
		if _, err := ParseCode(bad); err == nil {
			t.Errorf("ParseCode(%q) accepted", bad)
		}
	}
}

func TestCodesMarkdown(t *testing.T) {
	md := CodesMarkdown()
	lines := strings.Split(strings.TrimSpace(md), "\n")
	if len(lines) != len(codeTable)+2 {
		t.Fatalf("markdown has %d lines, want %d:\n%s", len(lines), len(codeTable)+2, md)
	}
	for _, ci := range codeTable {
		if !strings.Contains(md, "| `"+ci.Name+"` |") {
			t.Errorf("markdown lacks %s", ci.Name)
		}
	}
	if !strings.Contains(md, "| 45 | `TIMEOUT` |") {
		t.Errorf("markdown lacks the TIMEOUT row:\n%s", md)
	}
}
