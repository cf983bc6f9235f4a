package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/live"
)

func cmdPublish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var common Common
	fs, err := newCommonFlagSet(&common, "publish", "<table> '<json rows>' [flags]", `
Writes rows to the live stream, where the rdb DAPs of their label sets take them (an
instrument-like reference table instead sets the label set's reference vintage).
Rows are a JSON array of objects; '-' reads them from stdin. Each row goes to the
subject of its label set, read from its --label-keys columns. Rows without a "time"
key get the current time, except for the --reference tables.
With authentication on, connect with a feed credential (--creds <dir>/feed.nk).
Example:
  sg publish trade '[{"sym":"VOD.L","region":"eu","price":0.72,"size":100,"side":"B","venue":"XLON","block":false}]'`, stdout, stderr)
	if err != nil {
		return err
	}
	labelKeys := fs.String("label-keys", "region", "label columns, comma-separated, that route rows to their label set")
	reference := fs.String("reference", "instrument", "reference tables (no time column), comma-separated")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on publishing")
	pos, done, err := parseMixed(fs, args, stdout)
	if done {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return fmt.Errorf("want a table and a JSON array of rows, got %d arguments", len(pos))
	}
	table, data := pos[0], []byte(pos[1])
	if pos[1] == "-" {
		if data, err = io.ReadAll(io.LimitReader(os.Stdin, 256<<20)); err != nil {
			return fmt.Errorf("read rows from stdin: %w", err)
		}
	}
	rows, err := messages.DecodeTableJSON(data, nil)
	if err != nil {
		return fmt.Errorf("rows: %w", err)
	}
	if rows.NumRows() == 0 {
		return fmt.Errorf("rows: no rows to publish")
	}
	if rows.Index(engine.TimeColumn) < 0 && !slices.Contains(strings.Split(*reference, ","), table) {
		stamp := messages.Column{Name: engine.TimeColumn, Type: messages.TypeTimestamp, Ints: make([]int64, rows.NumRows())}
		now := time.Now().UnixNano()
		for i := range stamp.Ints {
			stamp.Ints[i] = now
		}
		rows.Columns = append([]messages.Column{stamp}, rows.Columns...)
	}
	log, closeLog, err := newLogger(stderr, common.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, s, stop, err := connect(common, "sg-publish", log)
	if err != nil {
		return err
	}
	defer stop()
	pub, err := live.NewPublisher(nc, s, strings.Split(*labelKeys, ",")...)
	if err != nil {
		return err
	}
	seqs, err := pub.Publish(ctx, table, rows)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %d rows of %s in %d updates; stream sequences %v\n", rows.NumRows(), table, len(seqs), seqs)
	return nil
}
