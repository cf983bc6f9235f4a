package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/client"
)

// asyncWait bounds `sg query --async` without --wait: as long as a job is kept.
const asyncWait = 24 * time.Hour

// isTerminal: w is a character device (a progress bar can redraw its line).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// callAsync submits api as an async job, polls it after each Retry-After
// and prints its answer as callWith does. Progress goes to stderr: a bar
// redrawn in place on a terminal, one plain line per poll otherwise.
func callAsync(ctx context.Context, cl *client.Client, format, api string, jargs []byte, opts messages.Opts, stdout, stderr io.Writer, tty bool) error {
	var args any
	if len(jargs) > 0 {
		args = json.RawMessage(jargs)
	}
	job, err := cl.Submit(ctx, messages.RequestHeader{API: api, Opts: opts}, args)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sg: job %s accepted\n", job.ID)
	show := func(j client.Job) { fmt.Fprint(stderr, progressLine(j.Status, tty)) }
	show(job)
	resp, err := cl.Wait(ctx, job.ID, show)
	if tty {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return err
	}
	if st := resp.Header.Status; !st.IsOK() {
		fmt.Fprintf(stderr, "sg: %s (rc=%s ac=%s, job %s)\n", st.AI, st.RC, st.AC, job.ID)
		return &answerError{st: st}
	}
	if format == "json" {
		var v any
		if len(resp.Payload) > 0 {
			if err := messages.DecodeLimited(resp.Payload, &v, messages.PayloadLimits); err != nil {
				return fmt.Errorf("undecodable answer payload: %w", err)
			}
		}
		b, err := json.Marshal(map[string]any{"header": resp.Header, "payload": v})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return printPayload(stdout, format, resp.Payload)
}

// progressLine renders a job status: the share of the expected time already
// spent as a bar (elapsed / (elapsed + eta)), the state, position and eta.
func progressLine(s messages.JobStatus, tty bool) string {
	pos := ""
	if s.Position > 0 {
		pos = fmt.Sprintf(" position %d", s.Position)
	}
	eta := "eta ?"
	if s.ETA > 0 {
		eta = fmt.Sprintf("eta %ds", s.ETA)
	}
	text := fmt.Sprintf("%-11s%s %s, next poll in %ds (elapsed %ds)", s.State, pos, eta, s.RetryAfter, s.Elapsed)
	if !tty {
		return "sg: job " + s.JobID + ": " + text + "\n"
	}
	const width = 30
	done := 0
	if s.ETA > 0 {
		done = width * s.Elapsed / (s.Elapsed + s.ETA)
	}
	return "\r[" + strings.Repeat("#", done) + strings.Repeat(".", width-done) + "] " + text + "\033[K"
}
