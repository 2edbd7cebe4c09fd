package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// noopEventBridge accepts every entry without looking at it.
type noopEventBridge struct{}

func (noopEventBridge) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out := &eventbridge.PutEventsOutput{Entries: make([]ebtypes.PutEventsResultEntry, len(in.Entries))}
	for i := range out.Entries {
		out.Entries[i].EventId = aws.String("e")
	}
	return out, nil
}

// noopUpdateItem succeeds without doing anything (no BatchExecuteStatement:
// the Marker falls back to UpdateItem).
type noopUpdateItem struct{}

func (noopUpdateItem) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, nil
}

// noopBatch also has a BatchExecuteStatement that succeeds for every statement.
type noopBatch struct{ noopUpdateItem }

func (noopBatch) BatchExecuteStatement(_ context.Context, in *dynamodb.BatchExecuteStatementInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchExecuteStatementOutput, error) {
	return &dynamodb.BatchExecuteStatementOutput{Responses: make([]ddbtypes.BatchStatementResponse, len(in.Statements))}, nil
}

func benchEnvelopes(b *testing.B, n int) []outbox.Envelope {
	envs := make([]outbox.Envelope, n)
	for i := range envs {
		envs[i] = envelope(b, fmt.Sprint("o-", i), 1, 150)
	}
	return envs
}

// BenchmarkPack packs 100 entry sizes of about 400 bytes into PutEvents calls.
func BenchmarkPack(b *testing.B) {
	sizes := make([]int, 100)
	for i := range sizes {
		sizes[i] = 380 + i%40
	}
	b.ReportAllocs()
	for b.Loop() {
		if g := relay.Pack(sizes, relay.DefaultMaxRequestBytes); len(g) != 10 {
			b.Fatalf("%d groups", len(g))
		}
	}
}

// BenchmarkPublish publishes 100 envelopes (about 400-byte entries) through a
// no-op EventBridge: entry building (Detail encoding), packing, 10 calls.
func BenchmarkPublish(b *testing.B) {
	p, err := relay.NewPublisher(noopEventBridge{}, relay.PublisherConfig{Source: "com.example.test", EventBusName: "bus", Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	envs := benchEnvelopes(b, 100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p.Publish(ctx, envs)
	}
}

// BenchmarkMarkAll marks 100 published records through a no-op client:
// "batch" builds 4 BatchExecuteStatement calls, "updateitem" builds 100
// UpdateItem calls (the fallback path, with expression building).
func BenchmarkMarkAll(b *testing.B) {
	envs := benchEnvelopes(b, 100)
	marks := make([]relay.Mark, len(envs))
	for i, e := range envs {
		marks[i] = relay.Mark{Key: outbox.KeyFor(e.AggregateType, e.AggregateID, 1, 0), Envelope: e,
			Result: relay.Result{Status: relay.Published, EventID: "bus-" + e.EventID}}
	}
	for _, bc := range []struct {
		name string
		ddb  relay.UpdateItemAPI
	}{{"batch", noopBatch{}}, {"updateitem", noopUpdateItem{}}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := testConfig().Marker
			cfg.Logger = quietLogger()
			m, err := relay.NewMarker(bc.ddb, &fakeSQS{}, cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				for _, err := range m.MarkAll(ctx, marks) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
