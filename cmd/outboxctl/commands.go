package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// tableFlag registers -table, defaulting to OUTBOX_TABLE_NAME.
func tableFlag(fs *flag.FlagSet) *string {
	return fs.String("table", os.Getenv(config.EnvOutboxTable), "outbox table name (default $"+config.EnvOutboxTable+")")
}

// shardsFlag registers -shards, defaulting to PENDING_SHARDS or 16.
func shardsFlag(fs *flag.FlagSet) *int {
	def, err := config.Int(config.EnvPendingShards, config.DefaultPendingShards)
	if err != nil {
		def = config.DefaultPendingShards
	}
	return fs.Int("shards", def, "pending index shards; must equal the writers' "+config.EnvPendingShards+" (default $"+config.EnvPendingShards+" or 16)")
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func needTable(name, table string) error {
	if table == "" {
		return usageErr("%s: -table is required (or $%s)", name, config.EnvOutboxTable)
	}
	return nil
}

func runStatus(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("status")
	table := tableFlag(fs)
	shards := shardsFlag(fs)
	window := fs.Duration("window", 15*time.Minute, "count records published in this last window (0: skip the table scan, and the parked count)")
	prefix := fs.String("queue-prefix", "", "report every queue whose name starts with this (ListQueues), classified by the local names: -parked, -relay-onfailure, -<consumer>-dlq")
	parkedQ := fs.String("parked-queue", os.Getenv(config.EnvParkedQueueURL), "parked-records queue URL (default $"+config.EnvParkedQueueURL+")")
	failureQ := fs.String("failure-queue", "", "the stream event source mapping's on-failure queue URL")
	var dlqs listFlag
	fs.Var(&dlqs, "dlq", "a consumer DLQ URL (repeatable)")
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("status", *table); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	region, err := multiRegion("status", *regions, c.region)
	if err != nil {
		return err
	}
	list, _ := config.ParseRegions(*regions)         // checked by multiRegion
	legacyOwner := region != "" && list[0] == region // also counts the records from before the switch

	var refs []operator.QueueRef
	if *prefix != "" {
		if refs, err = operator.DiscoverQueues(ctx, c.sqs, *prefix); err != nil {
			return err
		}
	}
	if *parkedQ != "" {
		refs = append(refs, operator.QueueRef{Kind: operator.KindParked, URL: *parkedQ})
	}
	if *failureQ != "" {
		refs = append(refs, operator.QueueRef{Kind: operator.KindStreamFailure, URL: *failureQ})
	}
	for _, u := range dlqs {
		refs = append(refs, operator.QueueRef{Kind: operator.KindConsumerDLQ, URL: u})
	}
	st, err := operator.ReadStatus(ctx, c.ddb, c.sqs, operator.StatusOptions{Table: *table, Shards: *shards, Window: *window, Queues: refs, Region: region, LegacyOwner: legacyOwner})
	if err != nil {
		return err
	}
	st.Write(e.out)
	if len(refs) == 0 {
		fmt.Fprintln(e.out, "queues            none given (-queue-prefix, or -parked-queue, -failure-queue, -dlq)")
	}
	return nil
}

// selectFlags registers -event, -aggregate, -aggregate-type and -from-seq.
type selection struct {
	event, aggregate, aggregateType *string
	fromSeq                         *int64
}

func selectFlags(fs *flag.FlagSet) selection {
	return selection{
		event:         fs.String("event", "", "the outbox event_id (a table Scan: no event_id index)"),
		aggregate:     fs.String("aggregate", "", "the aggregate id (an order id): its events, a Query"),
		aggregateType: fs.String("aggregate-type", order.AggregateType, "the aggregate type of -aggregate"),
		fromSeq:       fs.Int64("from-seq", 0, "with -aggregate: only events with sequence >= this"),
	}
}

// find returns the selected records.
func (s selection) find(ctx context.Context, name string, c clients, table string) ([]operator.EventView, error) {
	switch {
	case *s.event != "" && *s.aggregate != "":
		return nil, usageErr("%s: give -event or -aggregate, not both", name)
	case *s.event != "":
		return operator.FindEvent(ctx, c.ddb, table, *s.event)
	case *s.aggregate != "":
		return operator.AggregateEvents(ctx, c.ddb, table, *s.aggregateType, *s.aggregate, *s.fromSeq)
	}
	return nil, usageErr("%s: -event ID or -aggregate ID is required", name)
}

// defaultConsumerTables is -consumer-tables from the environment: the
// example consumers' tables where their variables are set.
func defaultConsumerTables() string {
	var pairs []string
	for _, c := range []string{routing.ConsumerLedger, routing.ConsumerNotifier} {
		if t := os.Getenv(consumerTableEnv[c]); t != "" {
			pairs = append(pairs, c+"="+t)
		}
	}
	return strings.Join(pairs, ",")
}

// parseConsumerTables reads CONSUMER=TABLE pairs, comma-separated.
func parseConsumerTables(v string) ([]operator.ConsumerState, error) {
	var out []operator.ConsumerState
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		name, table, ok := strings.Cut(p, "=")
		if !ok || name == "" || table == "" {
			return nil, fmt.Errorf("%q is not CONSUMER=TABLE", p)
		}
		out = append(out, operator.ConsumerState{Consumer: name, Table: table})
	}
	return out, nil
}

func runShow(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("show")
	table := tableFlag(fs)
	sel := selectFlags(fs)
	consumerTables := fs.String("consumer-tables", defaultConsumerTables(), "show which consumers applied each event: CONSUMER=TABLE pairs, comma-separated, each consumer's own table (its dedup markers live beside its effects; default from $"+
		appenv.EnvLedgerTable+" and $"+appenv.EnvNotificationsTable+")")
	idemTable := fs.String("idempotency-table", os.Getenv(appenv.EnvIdempotencyTable), "idempotency table: show the idempotency record of each event of the consumers with effects outside DynamoDB (default $"+appenv.EnvIdempotencyTable+")")
	idemConsumers := fs.String("idempotent-consumers", routing.ConsumerFulfilment, "with -idempotency-table: those consumers (their idempotency namespaces), comma-separated")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("show", *table); err != nil {
		return err
	}
	if *sel.event == "" && *sel.aggregate == "" {
		return usageErr("show: -event ID or -aggregate ID is required")
	}
	states, err := parseConsumerTables(*consumerTables)
	if err != nil {
		return usageErr("show: -consumer-tables: %v", err)
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	views, err := sel.find(ctx, "show", c, *table)
	if err != nil {
		return err
	}
	if len(states) > 0 {
		if err := operator.Applied(ctx, c.ddb, states, views); err != nil {
			return err
		}
	}
	if *idemTable != "" {
		if err := operator.Idempotent(ctx, c.ddb, *idemTable, strings.Split(*idemConsumers, ","), views); err != nil {
			return err
		}
	}
	for _, v := range views {
		v.Write(e.out)
	}
	fmt.Fprintf(e.out, "%d record(s)\n", len(views))
	return nil
}

func runReplay(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("replay")
	table := tableFlag(fs)
	shards := shardsFlag(fs)
	sel := selectFlags(fs)
	direct := fs.Bool("direct", false, "PutEvents the stored envelope now through the relay's publisher, from your principal (the local stack; on AWS the bus policy admits only the relay and reconciler roles), instead of making the record pending for the reconciler")
	bus := fs.String("bus", os.Getenv(config.EnvEventBusName), "with -direct: event bus name or ARN the relay publishes to (default $"+config.EnvEventBusName+")")
	source := fs.String("source", config.String(config.EnvEventSource, appenv.EventSource), "with -direct: event Source, as the relay sets it (default $"+config.EnvEventSource+" or "+appenv.EventSource+")")
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("replay", *table); err != nil {
		return err
	}
	if *direct && *bus == "" {
		return usageErr("replay -direct: -bus is required (or $%s)", config.EnvEventBusName)
	}
	if *sel.event == "" && *sel.aggregate == "" {
		return usageErr("replay: -event ID or -aggregate ID is required")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	region, err := multiRegion("replay", *regions, c.region)
	if err != nil {
		return err
	}
	views, err := sel.find(ctx, "replay", c, *table)
	if err != nil {
		return err
	}
	var results []operator.ReplayResult
	var summary string
	if *direct {
		pub, err := relay.NewPublisher(c.eb, relay.PublisherConfig{EventBusName: *bus, Source: *source,
			Logger: slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return err
		}
		results, err = operator.Replay(ctx, pub, views)
		summary = "replayed to " + *bus + " (consumers deduplicate on event_id)"
		return printReplay(e.out, results, operator.ReplayPublished, summary, err)
	}
	results, err = operator.Requeue(ctx, c.ddb, *table, *shards, views, time.Now(), operator.RequeueInRegion(region))
	summary = "requeued: PENDING again, the reconciler publishes each on its next run once older than " + reconcileAge + " (created_at is kept; consumers deduplicate on event_id)"
	return printReplay(e.out, results, operator.ReplayRequeued, summary, err)
}

// printReplay prints one line per record (outcome, event id, type,
// sequence, bus event id or reason) and the count of those with outcome
// done, and returns err.
func printReplay(w io.Writer, results []operator.ReplayResult, done, summary string, err error) error {
	n := 0
	for _, r := range results {
		v := r.View
		detail := r.Reason
		if r.Outcome == operator.ReplayPublished {
			detail = r.BusEventID
		}
		if r.Outcome == done {
			n++
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", r.Outcome, v.EventID, v.EventType, v.Sequence, detail)
	}
	fmt.Fprintf(w, "%d of %d event(s) %s\n", n, len(results), summary)
	return err
}

func runParked(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("parked")
	table := tableFlag(fs)
	limit := fs.Int("limit", 100, "list at most this many records (0: all)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("parked", *table); err != nil {
		return err
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	recs, err := relay.ListParked(ctx, c.ddb, *table, *limit)
	for _, r := range recs {
		fmt.Fprintf(e.out, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Key.PK, r.Key.SK, r.EventID, r.EventType, r.ParkedAt, r.Reason)
	}
	fmt.Fprintf(e.out, "%d parked record(s)\n", len(recs))
	return err
}

func runRedrive(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("redrive")
	table := tableFlag(fs)
	shards := shardsFlag(fs)
	pk := fs.String("pk", "", "the record's pk")
	sk := fs.String("sk", "", "the record's sk")
	event := fs.String("event", "", "the record's event_id (a table Scan)")
	all := fs.Bool("all", false, "every parked record")
	regions := regionsFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := needTable("redrive", *table); err != nil {
		return err
	}
	chosen := 0
	for _, set := range []bool{*pk != "" || *sk != "", *event != "", *all} {
		if set {
			chosen++
		}
	}
	if chosen != 1 || (*pk != "") != (*sk != "") {
		return usageErr("redrive: give -pk PK -sk SK, -event ID, or -all")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	region, err := multiRegion("redrive", *regions, c.region)
	if err != nil {
		return err
	}
	opts := []relay.RedriveOption{relay.RedriveInRegion(region)}
	if list, _ := config.ParseRegions(*regions); region != "" && list[0] == region {
		// The legacy owner also redrives records parked before the switch
		// to multi-Region mode (no origin Region).
		opts = append(opts, relay.RedriveAsLegacyOwner())
	}
	type target struct {
		key            outbox.Key
		eventID, etype string
	}
	var targets []target
	switch {
	case *all:
		recs, err := relay.ListParked(ctx, c.ddb, *table, 0)
		if err != nil {
			return err
		}
		for _, r := range recs {
			targets = append(targets, target{r.Key, r.EventID, r.EventType})
		}
	case *event != "":
		views, err := operator.FindEvent(ctx, c.ddb, *table, *event)
		if err != nil {
			return err
		}
		for _, v := range views {
			targets = append(targets, target{v.Key, v.EventID, v.EventType})
		}
	default:
		targets = []target{{key: outbox.Key{PK: *pk, SK: *sk}}}
	}
	var errs []error
	n := 0
	for _, t := range targets {
		if err := relay.Redrive(ctx, c.ddb, *table, *shards, t.key, time.Now(), opts...); err != nil {
			errs = append(errs, err)
			fmt.Fprintf(e.out, "failed\t%s\t%s\t%s\t%v\n", t.key.PK, t.key.SK, t.eventID, err)
			continue
		}
		n++
		fmt.Fprintf(e.out, "redriven\t%s\t%s\t%s\t%s\n", t.key.PK, t.key.SK, t.eventID, t.etype)
	}
	fmt.Fprintf(e.out, "%d of %d record(s) redriven: now PENDING, the reconciler publishes each on its next run once older than %s\n", n, len(targets), reconcileAge)
	return errors.Join(errs...)
}

// queueURL returns u when it is a URL, else the URL of the queue named u
// (GetQueueUrl).
func queueURL(ctx context.Context, c clients, u string) (string, error) {
	if u == "" || strings.Contains(u, "://") {
		return u, nil
	}
	out, err := c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(u)})
	if err != nil {
		return "", fmt.Errorf("queue %s: %w", u, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

func runConsumerDLQ(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("consumer-dlq")
	dlq := fs.String("dlq", "", "the consumer DLQ: URL or queue name")
	limit := fs.Int("limit", 100, "list at most this many messages")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dlq == "" {
		return usageErr("consumer-dlq: -dlq is required")
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	u, err := queueURL(ctx, c, *dlq)
	if err != nil {
		return err
	}
	return consumerDLQ(ctx, e.out, c.sqs, u, *limit)
}

func runConsumerRedrive(ctx context.Context, e *cmdEnv, args []string) error {
	fs := e.newFlags("consumer-redrive")
	dlq := fs.String("dlq", "", "the consumer DLQ: URL or queue name")
	queue := fs.String("queue", "", "the consumer queue to send the messages back to: URL or queue name")
	maxMsgs := fs.Int("max", 0, "move at most this many messages (0: all)")
	var senders listFlag
	fs.Var(&senders, "sender", "the consumer function's execution role id (AROA…, aws iam get-role --query Role.RoleId): its own dead letters are redriven too (repeatable; consumer-dlq shows each message's sender)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dlq == "" || *queue == "" {
		return usageErr("consumer-redrive: -dlq and -queue are required")
	}
	for _, s := range senders {
		if strings.TrimSpace(s) == "" {
			return usageErr("consumer-redrive: -sender must not be empty")
		}
	}
	ctx, c, done, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	du, err := queueURL(ctx, c, *dlq)
	if err != nil {
		return err
	}
	qu, err := queueURL(ctx, c, *queue)
	if err != nil {
		return err
	}
	return consumerRedrive(ctx, e.out, c.sqs, du, qu, senders, *maxMsgs)
}

func dlqLine(w io.Writer, verb string) func(sqsconsumer.DeadLetter) {
	return func(d sqsconsumer.DeadLetter) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", verb, d.MessageID, dlqEvent(d.Body), d.Reason, d.From(), d.Error)
	}
}

// dlqEvent names the outbox event a DLQ message carries (its body is the
// EventBridge event, its detail the envelope): "<type> <aggregate
// type>/<id> #<sequence> <event id>", or "-" for a body that is not one.
func dlqEvent(body string) string {
	var ev struct {
		Detail struct {
			EventID       string `json:"event_id"`
			EventType     string `json:"event_type"`
			AggregateType string `json:"aggregate_type"`
			AggregateID   string `json:"aggregate_id"`
			Sequence      int64  `json:"sequence"`
		} `json:"detail"`
	}
	if json.Unmarshal([]byte(body), &ev) != nil || ev.Detail.EventID == "" {
		return "-"
	}
	d := ev.Detail
	return fmt.Sprintf("%s %s/%s #%d %s", d.EventType, d.AggregateType, d.AggregateID, d.Sequence, d.EventID)
}

// consumerDLQ lists the DLQ at dlq through sqsconsumer.Peek, one line per
// message (verb, message id, the event (dlqEvent), reason, where it came from: the queue whose
// redrive policy moved it or the principal that sent it, error), then a
// count.
func consumerDLQ(ctx context.Context, w io.Writer, q sqsconsumer.QueueAPI, dlq string, limit int) error {
	msgs, err := sqsconsumer.Peek(ctx, q, dlq, sqsconsumer.RedriveOptions{Max: limit, OnMessage: dlqLine(w, "dead-lettered")})
	fmt.Fprintf(w, "%d message(s) on %s\n", len(msgs), dlq)
	return err
}

// redriveAPI is what consumer-redrive calls: the DLQ's messages and the
// consumer queue's ARN.
type redriveAPI interface {
	sqsconsumer.QueueAPI
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// consumerRedrive moves the consumer's messages on the DLQ to queue through
// sqsconsumer.Redrive, one line per message moved ("redriven") and per
// message left ("left", with why: a message neither moved there by queue's
// redrive policy nor sent by one of senders is never forwarded), then a
// count.
func consumerRedrive(ctx context.Context, w io.Writer, q redriveAPI, dlq, queue string, senders []string, maxMsgs int) error {
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queue), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return fmt.Errorf("consumer-redrive: the ARN of %s: %w", queue, err)
	}
	from := sqsconsumer.Provenance{SourceQueueARN: attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], SenderIDs: senders}
	res, err := sqsconsumer.Redrive(ctx, q, dlq, q, queue, sqsconsumer.RedriveOptions{
		Max: maxMsgs, From: from, OnMessage: dlqLine(w, "redriven"),
		OnLeft: func(l sqsconsumer.LeftMessage) {
			fmt.Fprintf(w, "left\t%s\t%s\t%s\t%s\n", l.MessageID, l.Reason, l.From(), l.Why)
		},
	})
	fmt.Fprintf(w, "%d message(s) redriven from %s to %s; %d left on the DLQ\n", res.Moved, dlq, queue, len(res.Left))
	return err
}

// reconcileAge names the knob of the reconciler's stale age where each
// user sets it: the local stack's flag (short by default; devstack's
// DevReconcileAfter and DevReconcileEvery, which a test checks against)
// and the reconciler function's variable on AWS.
var reconcileAge = "the reconciler's stale age (make dev: -reconcile-after, default " + localReconcileAfter +
	", the next run within -reconcile-every, default " + localReconcileEvery + ", or the console's Reconcile now; on AWS: " +
	config.EnvReconcileAfterSeconds + " of the reconciler function, default " + config.DefaultReconcileAfter.String() + ")"

const (
	localReconcileAfter = "10s"
	localReconcileEvery = "5s"
)
