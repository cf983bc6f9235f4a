package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/services/gw/httpapi"
)

// The HTTP adapter's bounds on slow callers come from the environment, with
// httpapi's defaults, and a bad value is refused by name.
func TestHTTPConfig(t *testing.T) {
	c, err := loadHTTPConfig(env())
	if err != nil {
		t.Fatal(err)
	}
	if c.ChunkIdle != httpapi.DefaultChunkIdle || c.MaxBacklogBytes != httpapi.DefaultMaxBacklogBytes || c.MaxBacklogTotal != httpapi.DefaultMaxBacklogTotal {
		t.Fatalf("defaults %+v", c)
	}
	c, err = loadHTTPConfig(env("SG_HTTP_CHUNK_IDLE", "5s", "SG_HTTP_MAX_BACKLOG_BYTES", "1048576", "SG_HTTP_MAX_BACKLOG_TOTAL", "8388608"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ChunkIdle != 5*time.Second || c.MaxBacklogBytes != 1<<20 || c.MaxBacklogTotal != 8<<20 {
		t.Fatalf("set %+v", c)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"SG_HTTP_CHUNK_IDLE", "soon"}, "SG_HTTP_CHUNK_IDLE"},
		{[]string{"SG_HTTP_MAX_BACKLOG_BYTES", "0"}, "SG_HTTP_MAX_BACKLOG_BYTES"},
		{[]string{"SG_HTTP_MAX_BACKLOG_TOTAL", "-1"}, "SG_HTTP_MAX_BACKLOG_TOTAL"},
		{[]string{"SG_HTTP_MAX_BACKLOG_BYTES", "2048", "SG_HTTP_MAX_BACKLOG_TOTAL", "1024"}, "is below"},
	} {
		if _, err := loadHTTPConfig(env(tc.env...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.env, err, tc.want)
		}
	}
}
