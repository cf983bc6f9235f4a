package main

import (
	"strings"
	"testing"
)

// A run adds its section on top and keeps every older section as it was; a
// file sg bench did not write is refused, not overwritten.
func TestBenchDocKeepsOlderSections(t *testing.T) {
	cfg := benchConfig{requests: 10, clients: 2, large: 1}
	first, err := benchDoc(nil, []string{"sg", "bench", "--out", "x"}, cfg, "\n### sg, request log on\n\n| first |\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, benchTitle) || strings.Count(first, "\n## sg bench, ") != 1 {
		t.Fatalf("first run's file:\n%s", first)
	}
	older := first + "\n## Sixth session\n\nhand-written notes\n"
	second, err := benchDoc([]byte(older), []string{"sg", "bench", "--large", "3"}, cfg, "\n### sg, request log on\n\n| second |\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(second, benchTitle) != 1 || strings.Count(second, "\n## sg bench, ") != 2 {
		t.Fatalf("second run's file has its title once and two runs:\n%s", second)
	}
	iSecond, iFirst, iNotes := strings.Index(second, "| second |"), strings.Index(second, "| first |"), strings.Index(second, "hand-written notes")
	if iSecond < 0 || iFirst < 0 || iNotes < 0 || !(iSecond < iFirst && iFirst < iNotes) {
		t.Fatalf("want the newest run first, then the older sections in their order:\n%s", second)
	}
	if !strings.Contains(second, "- command: `sg bench --large 3`") || !strings.Contains(second, "- command: `sg bench --out x`") {
		t.Fatalf("each run keeps its own command line:\n%s", second)
	}
	if _, err := benchDoc([]byte("# my notes\n\nprecious\n"), []string{"sg", "bench"}, cfg, "| t |\n"); err == nil {
		t.Fatal("a file sg bench did not write was accepted for overwriting")
	}
}
