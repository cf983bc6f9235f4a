package main

import (
	"strings"
	"testing"
	"time"
)

func TestDurabilityConfig(t *testing.T) {
	g, err := loadGWConfig(env())
	if err != nil {
		t.Fatal(err)
	}
	d := g.Durability
	if !d.JetStream || d.Replicas != 1 || d.Storage != "file" || d.RequestLogTTL != time.Hour {
		t.Fatalf("defaults %+v", d)
	}
	if l := d.gw(); l == nil || l.Replicas != 1 || l.Memory || l.MaxAge != time.Hour || l.CreateAfter != 0 {
		t.Fatalf("gw durability %+v", l)
	}
	for v, want := range map[string]time.Duration{"0": 0, "0ms": 0, "5ms": 5 * time.Millisecond, "100": 100 * time.Millisecond} {
		g, err := loadGWConfig(env("SG_REQUEST_LOG_CREATE_AFTER", v))
		if err != nil {
			t.Fatal(err)
		}
		if l := g.Durability.gw(); l.CreateAfter != want {
			t.Fatalf("SG_REQUEST_LOG_CREATE_AFTER=%s: %v, want %v", v, l.CreateAfter, want)
		}
	}
	r, err := loadRCConfig(env("SG_JS_REPLICAS", "3", "SG_JS_STORAGE", "memory"))
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Durability.rc(); s == nil || s.Replicas != 3 || !s.Memory {
		t.Fatalf("rc durability %+v", s)
	}
	off, err := loadRCConfig(env("SG_JETSTREAM", "off"))
	if err != nil || off.Durability.rc() != nil {
		t.Fatalf("SG_JETSTREAM=off: %+v %v", off.Durability, err)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"SG_JETSTREAM", "maybe"}, "SG_JETSTREAM"},
		{[]string{"SG_JS_REPLICAS", "0"}, "SG_JS_REPLICAS"},
		{[]string{"SG_JS_REPLICAS", "7"}, "at most 5"},
		{[]string{"SG_JS_STORAGE", "tape"}, "SG_JS_STORAGE"},
		{[]string{"SG_REQUEST_LOG_MAX_AGE", "-1s"}, "SG_REQUEST_LOG_MAX_AGE"},
		{[]string{"SG_REQUEST_LOG_CREATE_AFTER", "soon"}, "SG_REQUEST_LOG_CREATE_AFTER"},
	} {
		if _, err := loadGWConfig(env(tc.env...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
}
