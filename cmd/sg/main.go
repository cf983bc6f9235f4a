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
	fmt.Fprintf(w, "\nRun 'sg <command> --help' for the flags of a command.\n%s", envHelp)
}

const envHelp = `
Environment (flags win over SG_ names, SG_ names over the seed's KXI_ names):
  SG_NATS_URL                                        NATS URL (nats://127.0.0.1:4222)
  SG_NATS_CREDS                                      credential file: nkey seed from sg auth, or .creds (none)
  SG_NATS_INBOX_PREFIX                               inbox prefix (the credential's; else _INBOX)
  SG_NATS_TLS_CA / SG_NATS_TLS_CERT / SG_NATS_TLS_KEY  TLS: CA of the server, client certificate and key
  SG_AUTH_DIR                                        sg nats, sg run: credential directory, auth on (none)
  SG_TIMEOUT / KXI_SG_TIMEOUT                        default request timeout (60s)
  SG_TIMEOUT_MARGIN / KXI_SG_TIMEOUT_MARGIN          GW: wait after a deadline for the RC's timeout (30s)
  SG_MAX_RETRY / KXI_SG_MAX_RETRY                    RC: retries per request (3; 0 = none)
  SG_RC_TIMER / KXI_SG_RC_TIMER                      RC: timer period (10s)
  SG_MULTI_RC_TO_MAX_WAIT / KXI_SG_MULTI_RC_TO_MAX_WAIT  RC: timer periods to wait for secondaries (1)
  SG_SCOPE_AFFINITY / KXI_SCOPE_AFFINITY             GW: hard | soft (hard)
  SG_MAX_REQUEST_BYTES                               GW: largest request accepted, else TOO_LARGE (262144)
  SG_ASSEMBLY_NAME / KXI_ASSEMBLY_NAME               RC, DAP: assembly ("" = global)
  SG_ASSEMBLY_KEY / KXI_ASSEMBLY_KEY                 GW, RC: the label whose value names the assembly (none)
  SG_RC_LABELS                                       RC: its labels, k=v,... (the assembly key's among them)
  SG_RC_MAX_QUEUED / SG_RC_MAX_QUEUED_PER_CALLER     RC: portions queued in all, per caller (100000, 10000)
  SG_RC_LABEL_SET_RETENTION                          RC: requests wait for a label set this long after its DAPs left (10m; 0 = none)
  SG_DAP_MAX_QUEUE                                   DAP: portions waiting for a slot (1024)
  SG_AGG_MAX_REQUEST_BYTES / SG_AGG_MAX_BYTES        Agg: partials held per request, in all (256 MiB, 1 GiB)
  SG_HTTP_CHUNK_IDLE                                 HTTP API: longest wait for an answer's next message or its caller (30s)
  SG_HTTP_MAX_BACKLOG_BYTES / SG_HTTP_MAX_BACKLOG_TOTAL  HTTP API: held for slow callers, per answer, in all (64 MiB, 256 MiB)
  SG_PREFIX                                          subject prefix (sg)
  SG_JETSTREAM                                       GW, RC: request log and DAP state stream, on | off (on)
  SG_JS_STORAGE / SG_JS_REPLICAS                     their storage, file | memory (file), and replicas (1)
  SG_REQUEST_LOG_MAX_AGE                             request log retention (1h); request timeouts must stay below it
  SG_REQUEST_LOG_CREATE_AFTER                        GW: log each request with its first drive (0), or opt in to a delay: one answered sooner is never logged, and lost if its GW dies
  SG_ANSWER_STORE_BUCKET                             GW: object store of answers above the max payload (<PREFIX>_ANSWERS)
  SG_ANSWER_STORE_TTL / SG_ANSWER_STORE_MAX_BYTES    GW: how long they stay there, the bucket's size cap (10m, 1 GiB)
  SG_JOB_RETENTION                                   GW: how long a finished async job's answer is kept (24h)
  SG_GW_MAX_JOBS                                     GW: async jobs one GW runs at once (256)
  SG_GW_JOBS_CREDS                                   GW: client credential its async jobs run on (client.nk beside SG_NATS_CREDS)
  SG_RETRY_MIN / SG_RETRY_MAX                        Retry-After floor and ceiling (1s, 300s)
  SG_RETRY_SAFETY_MARGIN                             Retry-After: multiplier on the ETA, 0.0-1.0 (0.2)
  SG_RETRY_NOMINAL_EXEC / SG_RETRY_NOMINAL_AGG       Retry-After: execution P and merge T until measured (2s, 100ms)
SG_ durations take Go durations (60s) or milliseconds (60000); KXI_ durations are milliseconds.
`

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
