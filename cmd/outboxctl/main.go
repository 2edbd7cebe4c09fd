// Command outboxctl is the operator CLI of the outbox. It answers, against
// AWS or the local stack (make dev), what an outbox operator asks:
//
//	outboxctl [-endpoint URL] [-region R] [-timeout 5m] status  -table T [-window 15m] [-queue-prefix P | -parked-queue URL -failure-queue URL -dlq URL...]
//	outboxctl [-endpoint URL] show    -table T (-event ID | -aggregate ID [-from-seq N]) [-consumer-tables C=T,…]
//	outboxctl [-endpoint URL] replay  -table T (-event ID | -aggregate ID [-from-seq N]) [-direct -bus BUS]
//	outboxctl [-endpoint URL] parked  -table T [-limit 100]
//	outboxctl [-endpoint URL] redrive -table T [-shards 16] (-pk PK -sk SK | -event ID | -all)
//	outboxctl [-endpoint URL] consumer-dlq      -dlq DLQ [-limit 100]
//	outboxctl [-endpoint URL] consumer-redrive  -dlq DLQ -queue QUEUE [-sender ROLE_ID]... [-max 0]
//	outboxctl [-endpoint URL] rule-dlq-redrive  -dlq RULE_DLQ -queue QUEUE -rule RULE [-bus B] [-source S] [-max 0] [-dry-run] [-unrestricted-dlq]
//	outboxctl [-endpoint URL] consumer-buffered -consumer C [-consumer-table T]
//	outboxctl [-endpoint URL] consumer-baseline -consumer C [-consumer-table T] (-aggregate ID -last N | -from-orders-table T)
//	outboxctl [-endpoint URL] consumer-state-copy -from-table D -consumer C [-consumer-table T] [-dry-run]
//	outboxctl [-endpoint URL] backfill -archive A -rule R [-bus B] [-from T] [-to T] [-settle 10m] [-orders-table T]
//	outboxctl [-endpoint URL] replays  [-prefix P]
//	outboxctl [-endpoint URL] history  -table T AGGREGATE_ID
//	outboxctl [-region R] alarms test (-prefix STACK | -alarm NAME) [-wait 2m]
//	outboxctl -region B takeover  -table T -regions A,B -failed A [-survivor B] [-lag-margin 1m] [-by NAME]
//	outboxctl -region B release   -table T -regions A,B -failed A [-survivor B] [-by NAME]
//	outboxctl -region B takeovers -table T [-regions A,B]
//
// Multi-Region mode (issue 34, docs/MULTI-REGION.md): with -regions (or
// OUTBOX_REGIONS) set, status counts the client Region's pending shards,
// and redrive and replay act only on records written in the client's
// Region (-region), bumping their redrive generation; a record of another
// Region is refused (run the command there). In the first Region of
// -regions (the legacy owner) redrive also takes records parked before the
// switch to multi-Region mode (no origin Region), unstamped, back to their
// single-Region shard, which that Region's reconciler sweeps. takeover declares a Region
// down, an operator's decision and never a timer: the survivor (the
// client's Region) publishes the failed Region's replicated pending records
// and never writes them; release ends it; takeovers lists them with each
// Region's heartbeat age.
//
// Every command prints one line per record or message it handled and a
// count. status, show and parked read; redrive makes parked records
// pending again (the reconciler publishes them on its next run once older
// than RECONCILE_AFTER); replay sends a published event to the bus again,
// by default by making its record pending for the reconciler (the role the
// bus policy admits), with -direct at once through relay.Publisher, the
// relay's own PutEvents path, from the caller's principal (consumers
// deduplicate on the event_id either way);
// consumer-redrive sends a consumer DLQ's messages back to its queue: only
// the ones SQS's system attributes prove to be the consumer's (moved by the
// queue's redrive policy: DeadLetterQueueSourceArn; or sent by the
// consumer's role, -sender: SenderId); any other message is listed with its
// sender and left, so a message planted on the DLQ is never forwarded;
// rule-dlq-redrive sends the events EventBridge could not deliver to a
// consumer queue (the queue refused them: deleted, its KMS key disabled,
// its policy), which wait on the routing rule's DLQ, back to the queue:
// only once the DLQ's policy proves that only the rule sends there, and
// only the messages whose RULE_ARN, TARGET_ARN and event source are the
// rule's, the queue's and the outbox's; any other is listed with why and
// left (-dry-run lists, moves nothing);
// backfill replays the outbox's archive to one consumer's rule (a new or
// rebuilt consumer, docs/ARCHIVE.md), replays lists the replays, history
// lists an aggregate's published events;
// consumer-buffered lists what an ordered consumer's resequencer holds for
// a missing predecessor, consumer-baseline declares where an ordered
// consumer starts (docs/ORDERING.md); alarms test (AWS only) sets one of
// the stack's alarms to ALARM, reads its history until its SNS action's
// result appears and sets it back to OK: the post-deploy check that alarms
// reach their topic (operator.CheckAlarmNotifies).
// internal/operator holds the logic; the package doc says what each costs.
//
// -endpoint (or AWS_ENDPOINT_URL* set to a loopback address) means a local
// endpoint: dummy credentials, region us-east-1 unless set. The local stack
// serves DynamoDB (proxied to Dynoxide), its SQS queues and its bus on one
// endpoint (outboxdev dev prints it). Otherwise the SDK's default chain.
// Flags may come before or after the command; table, bus and queue flags
// default to the variables the functions read (OUTBOX_TABLE_NAME,
// EVENT_BUS_NAME, PARKED_QUEUE_URL, DEDUP_TABLE_NAME, PENDING_SHARDS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "outboxctl:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "outboxctl:", err)
		os.Exit(1)
	}
}

// errUsage marks a command line outboxctl cannot run (exit status 2).
var errUsage = errors.New("usage")

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// command is one subcommand: its one-line summary, example, and body.
type command struct {
	name, summary, example string
	run                    func(ctx context.Context, c *cmdEnv, args []string) error
}

// awsOnly names the commands the local stack cannot serve (their example
// names a region, not the local endpoint): alarms (no CloudWatch locally).
var awsOnly = map[string]bool{"alarms": true}

// commands are the subcommands in the order -h lists them (set in init:
// their help refers back to this list).
var commands []command

func init() {
	commands = []command{
		{"status", "pending records (per shard), oldest pending age, parked, published in the last -window, DLQ depths",
			"outboxctl -endpoint http://127.0.0.1:4580 status -table dev-outbox -queue-prefix dev-", runStatus},
		{"show", "an event (-event ID) or an aggregate's events (-aggregate ID): status, sequence, publish time, bus event id, parked reason, consumers applied (dedup markers) and the fulfilment consumer's idempotency record",
			"outboxctl -endpoint http://127.0.0.1:4580 show -table dev-outbox -aggregate ORDER_ID -consumer-tables ledger=dev-ledger,notifier=dev-notifications -idempotency-table dev-idempotency", runShow},
		{"replay", "send a published event (or an aggregate's events from -from-seq) again: made pending for the reconciler, or -direct through the relay's PutEvents",
			"outboxctl -endpoint http://127.0.0.1:4580 replay -table dev-outbox -aggregate ORDER_ID -from-seq 2", runReplay},
		{"parked", "list parked records: key, event id, type, parked at, reason",
			"outboxctl -endpoint http://127.0.0.1:4580 parked -table dev-outbox", runParked},
		{"redrive", "make parked records pending again (-pk/-sk, -event or -all); the reconciler publishes them",
			"outboxctl -endpoint http://127.0.0.1:4580 redrive -table dev-outbox -all", runRedrive},
		{"consumer-dlq", "list a consumer DLQ's messages (left in place): message id, reason, where from (source queue or sender), error",
			"outboxctl -endpoint http://127.0.0.1:4580 consumer-dlq -dlq dev-ledger-dlq", runConsumerDLQ},
		{"consumer-redrive", "move the consumer's own messages on its DLQ back to its queue (moved by its redrive policy, or sent by its role: -sender); list any other with its sender and leave it",
			"outboxctl -endpoint http://127.0.0.1:4580 consumer-redrive -dlq dev-ledger-dlq -queue dev-ledger", runConsumerRedrive},
		{"rule-dlq-redrive", "move the events EventBridge could not deliver to a consumer queue (on the routing rule's DLQ) back to the queue, proven by the DLQ's policy and each message's RULE_ARN, TARGET_ARN and source; list any other with why and leave it (-dry-run: list only)",
			"outboxctl -endpoint http://127.0.0.1:4580 rule-dlq-redrive -dlq dev-ledger-order-payments-rule-dlq -queue dev-ledger -rule ledger-order-payments -bus dev-bus -dry-run", runRuleDLQRedrive},
		{"consumer-buffered", "list the events an ordered consumer's resequencer holds for a missing predecessor: aggregate, sequence, the range it waits for, age",
			"outboxctl -endpoint http://127.0.0.1:4580 consumer-buffered -consumer ledger -consumer-table dev-ledger", runConsumerBuffered},
		{"consumer-baseline", "declare an ordered consumer's starting point: -aggregate ID -last N, or every order at its version (-from-orders-table)",
			"outboxctl -endpoint http://127.0.0.1:4580 consumer-baseline -consumer ledger -consumer-table dev-ledger -from-orders-table dev-orders", runConsumerBaseline},
		{"consumer-state-copy", "copy a consumer's dedup state (markers, ordering gates, buffered events) from the shared dedup table of earlier versions into its own table, never overwriting; run it with the consumer stopped, before it starts on the new table",
			"outboxctl -endpoint http://127.0.0.1:4580 consumer-state-copy -from-table dev-dedup -consumer ledger -consumer-table dev-ledger", runConsumerStateCopy},
		{"backfill", "replay the archive's events of a time range to one consumer's rule only (a new or rebuilt consumer), reporting progress until the replay ends; says which of the rule's event types the archive's pattern leaves out, and with -orders-table which orders began before what the archive holds (its creation, retention window, -from)",
			"outboxctl -endpoint http://127.0.0.1:4580 backfill -archive dev-archive -rule ledger-order-payments -bus dev-bus -settle 30s", runBackfill},
		{"replays", "list the bus's replays: name, state, progress, last event replayed, range",
			"outboxctl -endpoint http://127.0.0.1:4580 replays -prefix backfill-", runReplays},
		{"history", "an aggregate's published events (sequence, type, time, event id) from the outbox table, and which sequences expired from it",
			"outboxctl -endpoint http://127.0.0.1:4580 history -table dev-outbox ORDER_ID", runHistory},
		{"takeover", "declare a Region down (an operator's decision, never a timer): the survivor's reconciler also publishes the failed Region's replicated pending records older than its stale age plus -lag-margin, once each, never writing them; prints the runbook and the heartbeat ages",
			"outboxctl -endpoint http://127.0.0.1:4580 takeover -region eu-central-1 -table dev-outbox -regions eu-west-1,eu-central-1 -failed eu-west-1 -lag-margin 1m -by \"$USER/INC-123\"", runTakeover},
		{"release", "end a takeover (in the survivor's Region); the failed Region's reconciler keeps adopting what the survivor published",
			"outboxctl -endpoint http://127.0.0.1:4580 release -region eu-central-1 -table dev-outbox -regions eu-west-1,eu-central-1 -failed eu-west-1 -by \"$USER/INC-123\"", runRelease},
		{"takeovers", "list takeovers (active and released) and each Region's heartbeat age, as the client's Region's replica has them",
			"outboxctl -endpoint http://127.0.0.1:4580 takeovers -region eu-central-1 -table dev-outbox -regions eu-west-1,eu-central-1", runTakeovers},
		{"alarms", "alarms test (AWS only): set one of the stack's alarms to ALARM, wait for its SNS action's result in the alarm's history (success, or AWS's failure text), set it back to OK",
			"outboxctl -region eu-west-1 alarms test -prefix DdbOutbox", runAlarms},
	}
}

// usage writes the top-level help: global flags, every command with an
// example, credentials.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage: outboxctl [-endpoint URL] [-region REGION] <command> [flags]

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-17s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nexamples (against make dev, which prints its endpoint; on AWS drop -endpoint and use the stack outputs; alarms: AWS only):\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n", c.example)
	}
	fmt.Fprint(w, `
global flags (also accepted after the command):
  -endpoint URL   one endpoint for DynamoDB, SQS and EventBridge (the local stack's AWS front);
                  dummy credentials, region us-east-1 unless set. AWS_ENDPOINT_URL_DYNAMODB,
                  AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_EVENTBRIDGE set to a loopback address do the same per service.
  -region REGION  AWS region (default: AWS_REGION or the profile's)
  -timeout 5m     bound on the whole command, every AWS call and retry included
Without them: the AWS SDK's default configuration (profile, SSO, role).

Run "outboxctl <command> -h" for the flags of a command.
`)
}

// cmdEnv is what a command runs with.
type cmdEnv struct {
	out, errOut io.Writer
	target      target
}

// open applies -timeout to ctx (after the command's flags are parsed: it
// may follow the command name) and connects the clients; call done when
// the command ends.
func (e *cmdEnv) open(ctx context.Context) (context.Context, clients, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(ctx, e.target.timeout)
	c, err := e.target.connect(ctx)
	if err != nil {
		cancel()
		return ctx, clients{}, nil, err
	}
	return ctx, c, cancel, nil
}

// run parses the global flags, then the command and its flags, and runs
// it. It returns flag.ErrHelp after printing help, an error wrapping
// errUsage for a command line it cannot run, or the command's error.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	env := &cmdEnv{out: out, errOut: errOut}
	gfs := flag.NewFlagSet("outboxctl", flag.ContinueOnError)
	gfs.SetOutput(io.Discard)
	globalFlags(gfs, &env.target)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(out)
			return err
		}
		usage(errOut)
		return usageErr("%v", err)
	}
	rest := gfs.Args()
	if len(rest) == 0 {
		usage(errOut)
		return usageErr("no command")
	}
	if rest[0] == "help" {
		usage(out)
		return flag.ErrHelp
	}
	for _, c := range commands {
		if c.name == rest[0] {
			return withHint(c.run(ctx, env, rest[1:]), env.target)
		}
	}
	usage(errOut)
	return usageErr("unknown command %q", rest[0])
}

// globalFlags registers -endpoint and -region on fs (the top level and
// every command, so they may come before or after the command).
func globalFlags(fs *flag.FlagSet, t *target) {
	fs.StringVar(&t.endpoint, "endpoint", t.endpoint, "one endpoint for DynamoDB, SQS and EventBridge (local: dummy credentials)")
	fs.StringVar(&t.region, "region", t.region, "AWS region (default: AWS_REGION or the profile's)")
	if t.timeout == 0 {
		t.timeout = DefaultTimeout
	}
	fs.DurationVar(&t.timeout, "timeout", t.timeout, "bound on the whole command, every AWS call and retry included")
}

// DefaultTimeout bounds one command (a Scan of a large outbox table, a
// consumer DLQ of thousands of messages) unless -timeout says otherwise.
const DefaultTimeout = 5 * time.Minute

// newFlags returns a command's flag set with the global flags, printing
// its help (summary, example, flags) to out on -h.
func (e *cmdEnv) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	globalFlags(fs, &e.target)
	fs.SetOutput(e.out)
	fs.Usage = func() {
		for _, c := range commands {
			if c.name == name {
				fmt.Fprintf(e.out, "usage: outboxctl %s [flags]\n\n%s\n\nexample:\n  %s\n\nflags:\n", name, c.summary, c.example)
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

// parse parses a command's flags; a parse error wraps errUsage, -h returns
// flag.ErrHelp (after the flag package printed the help).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usageErr("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}
