// Command sg is the one binary of sg: every service, the NATS server, the
// all-in-one demo and a query client, as subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/sg-project/sg/services/defaults"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ae *answerError
		if !errors.As(err, &ae) { // an error answer was already printed
			fmt.Fprintln(os.Stderr, "sg:", err)
		}
		os.Exit(1)
	}
}

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"run":   {"everything in one process: NATS, GW, RC, Agg and a demo fleet of DAPs", cmdRun},
	"nats":  {"the NATS server alone, with JetStream (and with --auth, sg's users)", cmdNATS},
	"auth":  {"credentials: sg auth init <dir>, add, rotate, remove, list", cmdAuth},
	"gw":    {"a gateway", cmdGW},
	"rc":    {"a resource coordinator", cmdRC},
	"agg":   {"an aggregator", cmdAgg},
	"dap":   {"a data access process, or with --demo the demo fleet", cmdDAP},
	"query": {"call an API: sg query getData '{\"table\":\"trade\"}'", cmdQuery},
	"ping":  {"call ping: which DAPs are reached", cmdPing},
	"meta":  {"call getMeta: tables, DAPs and purviews", cmdMeta},

	"publish": {"write rows to the live stream: sg publish trade '[{...}]'", cmdPublish},
	"live":    {"live label sets: rdb, idb, hdb DAPs fed by the live stream, with rolls", cmdLive},
	"bench":   {"measure sg against plain NATS on the same server; adds a run to BENCHMARKS.md", cmdBench},
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "sg: a service gateway for sharded time-series data on NATS.\n\nUsage: sg <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-6s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'sg <command> --help' for the flags of a command.\n%s", envHelp())
}

// envHelp lists the environment from defaults.Table, the settings and
// defaults README's Configuration table is checked against.
func envHelp() string {
	var b strings.Builder
	b.WriteString("\nEnvironment (flags win over SG_ names, SG_ names over the seed's KXI_ names):\n")
	for _, s := range defaults.Table {
		name := s.Env
		if s.KXI != "" {
			name += " / " + s.KXI
		}
		fmt.Fprintf(&b, "  %-50s %s; default %s\n", name, s.Help, strings.ReplaceAll(s.Default, "`", ""))
	}
	b.WriteString("SG_ durations take Go durations (60s) or milliseconds (60000); KXI_ durations are milliseconds.\n")
	return b.String()
}

// realMain runs one subcommand; main only adds signals and the exit code.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("no command given")
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		usage(stderr)
		return fmt.Errorf("unknown command %q", name)
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

// newFlagSet returns a flag set for a subcommand whose --help prints the
// usage line, the description and the flags to stdout.
func newFlagSet(name, usageLine, description string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sg "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: sg %s %s\n\n%s\n\nFlags:\n", name, usageLine, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args; --help prints to stdout and ends the command without error.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (done bool, err error) {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return true, nil
		}
		if a == "--" {
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		return true, err
	}
	return false, nil
}
