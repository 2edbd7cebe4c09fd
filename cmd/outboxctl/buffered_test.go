package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// TestConsumerBufferedAndBaseline: events 3 and 5 of an order wait in the
// ledger's buffer; consumer-buffered lists each with the range it waits
// for; consumer-baseline declares the ledger's starting point after 2
// (once: a second call keeps it), after which sequence 3 is next; with
// -from-orders-table it sets one per order at its version.
func TestConsumerBufferedAndBaseline(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	a, err := dedup.NewApplier(w.ddb, dedup.Config{Table: w.dedupTable, Consumer: "ledger", Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	var r *dedup.Resequencer
	r, err = dedup.NewResequencer(a, func(ctx context.Context, ev events.EventBridgeEvent) error {
		env, err := dedup.DecodeEnvelope(ev)
		if err != nil {
			return err
		}
		_, err = a.ApplyEvent(ctx, env, nil)
		return err
	}, dedup.ResequencerConfig{Metrics: io.Discard}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{3, 5} {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-9", Sequence: seq},
			outbox.Event{Type: order.EventOrderShipped, Version: 1, Payload: map[string]any{"order_id": "o-9"}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		detail, _ := env.Detail()
		if err := r.Handle(ctx, events.EventBridgeEvent{ID: uuid.NewString(), DetailType: env.EventType, Source: "s", Detail: detail}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := w.ctl(t, "consumer-buffered", "-consumer-table", w.dedupTable, "-consumer", "ledger")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Order o-9\tsequence 3\twaits for 1..2", "Order o-9\tsequence 5\twaits for 1..4", "2 buffered event(s) of 1 aggregate(s) for consumer ledger"} {
		if !strings.Contains(out, want) {
			t.Errorf("consumer-buffered output lacks %q:\n%s", want, out)
		}
	}
	out, err = w.ctl(t, "consumer-baseline", "-consumer-table", w.dedupTable, "-consumer", "ledger", "-aggregate", "o-9", "-last", "2")
	if err != nil || !strings.Contains(out, "Order o-9\tafter sequence 2\tset") {
		t.Fatalf("consumer-baseline: %v\n%s", err, out)
	}
	out, err = w.ctl(t, "consumer-baseline", "-consumer-table", w.dedupTable, "-consumer", "ledger", "-aggregate", "o-9", "-last", "1")
	if err != nil || !strings.Contains(out, "kept") || !strings.Contains(out, "0 starting point(s) set (0 below the requested one, to cover no event the consumer holds), 1 kept") {
		t.Fatalf("second consumer-baseline: %v\n%s", err, out)
	}
	if out, _ = w.ctl(t, "consumer-buffered", "-consumer-table", w.dedupTable, "-consumer", "ledger"); !strings.Contains(out, "sequence 3\tnext (applied by the next sweep)") {
		t.Fatalf("after the baseline:\n%s", out)
	}

	orders := ddbtest.Name("ctl-orders")
	(&ddbtest.Env{DDB: w.ddb}).CreateTable(t, order.CreateTableInput(orders))
	for id, v := range map[string]string{"o-7": "4", "o-8": "1"} {
		if _, err := w.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(orders), Item: map[string]types.AttributeValue{
			order.AttrPK: &types.AttributeValueMemberS{Value: order.KeyPrefixOrder + id}, order.AttrKind: &types.AttributeValueMemberS{Value: order.KindOrder},
			order.AttrID: &types.AttributeValueMemberS{Value: id}, order.AttrVersion: &types.AttributeValueMemberN{Value: v},
			order.AttrCreatedAt: &types.AttributeValueMemberS{Value: time.Now().UTC().Format(time.RFC3339Nano)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	out, err = w.ctl(t, "consumer-baseline", "-consumer-table", w.dedupTable, "-consumer", "notifier", "-from-orders-table", orders)
	if err != nil || !strings.Contains(out, "Order o-7\tafter sequence 4\tset") || !strings.Contains(out, "2 starting point(s) set (0 below the requested one, to cover no event the consumer holds), 0 kept for consumer notifier") {
		t.Fatalf("consumer-baseline -from-orders-table: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"consumer-buffered", "-consumer-table", w.dedupTable},
		{"consumer-buffered", "-consumer", "wallet"}, // no table, none known for it
		{"consumer-baseline", "-consumer-table", w.dedupTable, "-consumer", "ledger"},
		{"consumer-baseline", "-consumer-table", w.dedupTable, "-consumer", "ledger", "-aggregate", "o-1"},
	} {
		if _, err := w.ctl(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}

// TestConsumerStateCopy: consumer-state-copy moves the ledger's buffered
// event and gate from the old shared dedup table into its own table
// (-dry-run first writes nothing), where consumer-buffered then finds
// them; it refuses to run without -from-table.
func TestConsumerStateCopy(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	a, err := dedup.NewApplier(w.ddb, dedup.Config{Table: w.dedupTable, Consumer: "ledger", Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := dedup.NewResequencer(a, func(ctx context.Context, ev events.EventBridgeEvent) error {
		env, err := dedup.DecodeEnvelope(ev)
		if err != nil {
			return err
		}
		_, err = a.ApplyEvent(ctx, env, nil)
		return err
	}, dedup.ResequencerConfig{Metrics: io.Discard}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{1, 3} {
		env, err := outbox.NewEnvelope(outbox.Aggregate{Type: order.AggregateType, ID: "o-c", Sequence: seq},
			outbox.Event{Type: order.EventOrderShipped, Version: 1, Payload: map[string]any{"order_id": "o-c"}}, outbox.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		detail, _ := env.Detail()
		if err := r.Handle(ctx, events.EventBridgeEvent{ID: uuid.NewString(), DetailType: env.EventType, Source: "s", Detail: detail}); err != nil {
			t.Fatal(err)
		}
	}
	own := ddbtest.Name("ctl-ledger")
	(&ddbtest.Env{DDB: w.ddb}).CreateTable(t, ledger.CreateTableInput(own))
	out, err := w.ctl(t, "consumer-state-copy", "-from-table", w.dedupTable, "-consumer", "ledger", "-consumer-table", own, "-dry-run")
	if err != nil || !strings.Contains(out, "would copy ledger's state") || !strings.Contains(out, "gates=1 buffered=1") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if out, _ := w.ctl(t, "consumer-buffered", "-consumer", "ledger", "-consumer-table", own); !strings.Contains(out, "0 buffered event(s)") {
		t.Fatalf("the dry run wrote:\n%s", out)
	}
	out, err = w.ctl(t, "consumer-state-copy", "-from-table", w.dedupTable, "-consumer", "ledger", "-consumer-table", own)
	if err != nil || !strings.Contains(out, "copied ledger's state") || !strings.Contains(out, "gates=1 buffered=1") {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	if out, _ := w.ctl(t, "consumer-buffered", "-consumer", "ledger", "-consumer-table", own); !strings.Contains(out, "Order o-c\tsequence 3\twaits for 2..2") {
		t.Fatalf("after the copy:\n%s", out)
	}
	t.Setenv(config.EnvDedupTable, "")
	if _, err := w.ctl(t, "consumer-state-copy", "-consumer", "ledger", "-consumer-table", own); !errors.Is(err, errUsage) {
		t.Fatalf("without -from-table: %v, want a usage error", err)
	}
}
