package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
)

// answerError is an error answer from sg; its ai was printed to stderr.
type answerError struct{ st messages.Status }

func (e *answerError) Error() string { return e.st.String() }

type queryFlags struct {
	common  Common
	opts    string
	format  string
	timeout time.Duration
	async   bool
	// onAnswer, if set, sees a successful answer (ping checks it).
	onAnswer func(messages.Response)
}

// newQueryFlagSet is the flag set of a command that calls the gateway: the
// common settings (newCommonFlagSet) and the query flags.
func newQueryFlagSet(name, usageLine, description string, stdout, stderr io.Writer) (*flag.FlagSet, *queryFlags, error) {
	q := &queryFlags{}
	fs, err := newCommonFlagSet(&q.common, name, usageLine, description, stdout, stderr)
	if err != nil {
		return nil, nil, err
	}
	addQueryFlags(fs, q)
	return fs, q, nil
}

func addQueryFlags(fs *flag.FlagSet, q *queryFlags) {
	fs.StringVar(&q.opts, "opts", "", `request options as JSON, e.g. '{"timeout":5000,"logCorr":"abc"}'`)
	fs.StringVar(&q.format, "format", "table", "output: table, csv, or json (the JSON envelope a JSON client gets)")
	fs.BoolVar(&q.async, "async", false, "submit as an async job and poll it after each Retry-After, showing state, position and eta")
	fs.DurationVar(&q.timeout, "wait", 0, "how long to wait for the answer (default: opts.timeout or 60s, plus the GW's 30s margin)")
}

// parseMixed parses flags placed before, between or after positional args.
func parseMixed(fs *flag.FlagSet, args []string, stdout io.Writer) (pos []string, done bool, err error) {
	if done, err := parse(fs, args, stdout); done {
		return nil, true, err
	}
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, true, err
		}
	}
	return pos, false, nil
}

func cmdQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, q, err := newQueryFlagSet("query", "<api> ['<json args>'] [flags]", `
Calls an API of the gateway and prints the answer. APIs: getData, ping, getMeta, sql.
Example:
  sg query getData '{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}'
  sg query sql 'SELECT sym, count(*) AS n FROM trade WHERE region = ''eu'' GROUP BY sym'
A "scope" key in the arguments picks the assembly: {"table":"trade","scope":{"assembly":"eu"}}.
The exit code is 1 on an error answer, whose ai is printed to stderr.`, stdout, stderr)
	if err != nil {
		return err
	}
	pos, done, err := parseMixed(fs, args, stdout)
	if done {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return fmt.Errorf("want an API and at most one JSON argument, got %d arguments", len(pos))
	}
	var jargs []byte
	if len(pos) == 2 {
		jargs = []byte(pos[1])
		if pos[0] == subjects.APISQL && !strings.HasPrefix(strings.TrimSpace(pos[1]), "{") {
			jargs, _ = json.Marshal(messages.SQLArgs{Query: pos[1]}) // the statement itself
		}
	}
	return call(ctx, *q, pos[0], jargs, stdout, stderr)
}

func cmdPing(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, q, err := newQueryFlagSet("ping", "[flags]", `Calls ping: which DAPs (matching --labels) are reached.`, stdout, stderr)
	if err != nil {
		return err
	}
	labels := fs.String("labels", "", "label selector k=v[,k=v], e.g. region=eu")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	var jargs []byte
	if *labels != "" {
		ls, err := parseLabels(*labels)
		if err != nil {
			return err
		}
		jargs, _ = json.Marshal(map[string]any{"labels": ls})
	}
	return callPing(ctx, *q, jargs, stdout, stderr) // ping.go
}

func cmdMeta(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, q, err := newQueryFlagSet("meta", "[flags]", `Calls getMeta: the tables, DAPs and purviews sg knows.`, stdout, stderr)
	if err != nil {
		return err
	}
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	return call(ctx, *q, subjects.APIGetMeta, nil, stdout, stderr)
}

func call(ctx context.Context, q queryFlags, api string, jargs []byte, stdout, stderr io.Writer) error {
	var opts messages.Opts
	if q.opts != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(q.opts)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&opts); err != nil {
			return fmt.Errorf("--opts %q: %w", q.opts, err)
		}
	}
	switch q.format {
	case "table", "csv", "json":
	default:
		return fmt.Errorf("--format %q: want table, csv or json", q.format)
	}
	wait := q.timeout
	if wait <= 0 {
		wait = defaultTimeout + defaultTimeoutMargin + 5*time.Second
		if opts.TimeoutMS > 0 {
			wait = time.Duration(opts.TimeoutMS)*time.Millisecond + defaultTimeoutMargin + 5*time.Second
		}
	}
	if q.async && q.timeout <= 0 {
		wait = asyncWait // a job may wait in queues far longer than its own timeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	log, closeLog, err := newLogger(stderr, q.common.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	nc, s, stop, err := connect(q.common, "sg-query", log)
	if err != nil {
		return err
	}
	defer stop()
	cl := client.New(nc, s)
	defer cl.Close()
	if q.async {
		return callAsync(ctx, cl, q.format, api, jargs, opts, stdout, stderr, isTerminal(stderr))
	}
	return callWith(ctx, cl, q.format, api, jargs, opts, stdout, stderr, q.onAnswer)
}

// callWith calls api and prints the answer in format. getData and sql
// answers are read as streams and printed window by window (callStream).
func callWith(ctx context.Context, cl *client.Client, format, api string, jargs []byte, opts messages.Opts, stdout, stderr io.Writer, onAnswer ...func(messages.Response)) error {
	if api == subjects.APIGetData || api == subjects.APISQL {
		return callStream(ctx, cl, format, api, jargs, opts, stdout, stderr)
	}
	var resp messages.Response
	if format == "json" {
		raw, err := cl.DoJSON(ctx, api, jargs, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", raw)
		if resp, err = messages.DecodeResponse(nil, raw); err != nil {
			return fmt.Errorf("answer is not a response envelope: %w", err)
		}
	} else {
		var args any
		if len(jargs) > 0 {
			args = json.RawMessage(jargs)
		}
		var err error
		if resp, err = cl.Do(ctx, api, args, opts); err != nil {
			return err
		}
	}
	if st := resp.Header.Status; !st.IsOK() {
		fmt.Fprintf(stderr, "sg: %s (rc=%s ac=%s, request %s)\n", st.AI, st.RC, st.AC, resp.Header.RequestID)
		return &answerError{st: st}
	}
	for _, f := range onAnswer {
		if f != nil {
			f(resp)
		}
	}
	if format == "json" {
		return nil
	}
	return printPayload(stdout, format, resp.Payload)
}

// callStream calls api (getData, sql) asking for its answer as a stream and
// prints each window of rows as it comes, so that an answer of any size goes
// through in memory bounded by a window: JSON as the one envelope a whole
// answer is, CSV with the header once, a table with the header once and each
// window's columns aligned within it.
func callStream(ctx context.Context, cl *client.Client, format, api string, jargs []byte, opts messages.Opts, stdout, stderr io.Writer) error {
	var (
		st      messages.Status
		id      string
		err     error
		rows    int
		windows int
	)
	if format == "json" {
		if st, err = cl.StreamJSON(ctx, api, jargs, opts, stdout); err == nil {
			fmt.Fprintln(stdout)
		}
	} else {
		var args any
		if len(jargs) > 0 {
			args = json.RawMessage(jargs)
		}
		var cw *csv.Writer
		if format == "csv" {
			cw = csv.NewWriter(stdout)
		}
		var rh messages.ResponseHeader
		rh, err = cl.StreamTables(ctx, messages.RequestHeader{API: api, Opts: opts}, args, func(t messages.Table) error {
			first := windows == 0
			windows++
			rows += t.NumRows()
			if cw != nil {
				return writeCSVRows(cw, t, first)
			}
			return writeTableRows(stdout, t, first)
		})
		st, id = rh.Status, rh.RequestID
		if err == nil && cw == nil {
			_, err = fmt.Fprintf(stdout, "(%d rows)\n", rows)
		}
	}
	var ae *client.AnswerError
	if errors.As(err, &ae) {
		st, err = ae.Status, nil
		if id == "" { // an error comes whole, not as a stream: its id is the answer's
			id = ae.RequestID
		}
	}
	if err != nil {
		return err
	}
	if !st.IsOK() {
		fmt.Fprintf(stderr, "sg: %s (rc=%s ac=%s, request %s)\n", st.AI, st.RC, st.AC, id)
		return &answerError{st: st}
	}
	return nil
}

// printPayload prints a table as a table or CSV, and anything else as JSON.
func printPayload(w io.Writer, format string, payload []byte) error {
	var t messages.Table
	if len(payload) > 0 && messages.DecodeLimited(payload, &t, messages.PayloadLimits) == nil && t.Validate() == nil {
		if format == "csv" {
			return writeCSV(w, t)
		}
		return writeTable(w, t)
	}
	var v any
	if len(payload) > 0 {
		if err := messages.DecodeLimited(payload, &v, messages.PayloadLimits); err != nil {
			return fmt.Errorf("undecodable answer payload: %w", err)
		}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func cell(c *messages.Column, i int) string {
	switch c.Type {
	case messages.TypeSymbol, messages.TypeString:
		return c.Strings[i]
	case messages.TypeFloat:
		return strconv.FormatFloat(c.Floats[i], 'f', -1, 64)
	case messages.TypeInt:
		return strconv.FormatInt(c.Ints[i], 10)
	case messages.TypeTimestamp:
		return time.Unix(0, c.Ints[i]).UTC().Format(messages.TimeFormat)
	case messages.TypeBool:
		return strconv.FormatBool(c.Bools[i])
	}
	return "?"
}

func writeTable(w io.Writer, t messages.Table) error {
	if err := writeTableRows(w, t, true); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "(%d rows)\n", t.NumRows())
	return err
}

// writeTableRows writes t's rows aligned, under a line of column names if
// header.
func writeTableRows(w io.Writer, t messages.Table, header bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if header {
		for k := range t.Columns {
			if k > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, t.Columns[k].Name)
		}
		fmt.Fprintln(tw)
	}
	n := t.NumRows()
	for i := 0; i < n; i++ {
		for k := range t.Columns {
			if k > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell(&t.Columns[k], i))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeCSV(w io.Writer, t messages.Table) error {
	return writeCSVRows(csv.NewWriter(w), t, true)
}

// writeCSVRows writes t's rows to cw, under a line of column names if header.
func writeCSVRows(cw *csv.Writer, t messages.Table, header bool) error {
	row := make([]string, len(t.Columns))
	if header {
		for k := range t.Columns {
			row[k] = t.Columns[k].Name
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	for i := 0; i < t.NumRows(); i++ {
		for k := range t.Columns {
			row[k] = cell(&t.Columns[k], i)
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
