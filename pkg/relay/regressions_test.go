package relay_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// blankResultBus answers through fakeEventBridge, but replaces the result
// entry of event blank with an empty one ({}: neither EventId nor
// ErrorCode), which the PutEvents API reference does not describe and the
// relay must not take as accepted.
type blankResultBus struct {
	*fakeEventBridge
	blank string // envelope event id
}

func (b blankResultBus) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out, err := b.fakeEventBridge.PutEvents(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for i, e := range in.Entries {
		if detailEventID(e) == b.blank {
			out.Entries[i] = ebtypes.PutEventsResultEntry{}
		}
	}
	return out, nil
}

// TestPublisherEmptyResultEntryIsRetryable: a result entry with neither
// EventId nor ErrorCode is a retryable failure (CodeNoResult), with no
// EventID; the entries beside it are published.
func TestPublisherEmptyResultEntryIsRetryable(t *testing.T) {
	t.Parallel()
	good, blank := envelope(t, "g", 1, 10), envelope(t, "b", 1, 10)
	bus := blankResultBus{fakeEventBridge: &fakeEventBridge{}, blank: blank.EventID}
	res := newPublisher(t, bus, func(c *relay.PublisherConfig) { c.MaxAttempts = 2 }).
		Publish(context.Background(), []outbox.Envelope{good, blank})
	if res[0].Status != relay.Published || res[0].EventID != "bus-"+good.EventID {
		t.Errorf("good entry: %+v, want Published", res[0])
	}
	if res[1].Status != relay.RetryableFailure || res[1].ErrorCode != relay.CodeNoResult || res[1].EventID != "" || res[1].Attempts != 2 {
		t.Errorf("empty result entry: %+v, want RetryableFailure %s after 2 attempts, no EventID", res[1], relay.CodeNoResult)
	}
	if n := bus.sent(); n[good.EventID] != 1 || n[blank.EventID] != 2 {
		t.Errorf("sent %v: the accepted entry must not be re-sent, the empty one must be", n)
	}
}

// TestHandleEmptyResultEntryNotMarked: through Handle, the record whose
// result entry is empty is not marked published and its sequence number is
// reported; the record beside it is marked.
func TestHandleEmptyResultEntryNotMarked(t *testing.T) {
	t.Parallel()
	good, blank := envelope(t, "g", 1, 10), envelope(t, "b", 1, 10)
	ev := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		insertRecord(t, good, "810000000000000000000"),
		insertRecord(t, blank, "810000000000000000001"),
	}}
	bus := blankResultBus{fakeEventBridge: &fakeEventBridge{}, blank: blank.EventID}
	ddb := &fakeDDB{}
	cfg := testConfig()
	cfg.Publisher.MaxAttempts = 2
	r, err := relay.New(bus, ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "810000000000000000001" {
		t.Fatalf("batchItemFailures = %+v, want exactly the empty-result record's sequence number", resp.BatchItemFailures)
	}
	ups := ddb.byPK()
	if u, ok := ups["Order#b"]; ok {
		t.Errorf("record with an empty result entry was marked: %s", u)
	}
	if u := ups["Order#g"]; !strings.Contains(u, "status = PUBLISHED") {
		t.Errorf("good record not marked published: %q", u)
	}
}

// TestHandlePoisonWithoutUsableKeysIsNotAcknowledged: an INSERT of an
// outbox item whose image does not decode (poison) cannot be parked when
// its Keys are unusable either. It must never be acknowledged: Handle
// reports its sequence number (or fails the batch), and the decodable
// record beside it is still published and marked.
func TestHandlePoisonWithoutUsableKeysIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		keys        map[string]events.DynamoDBAttributeValue
		poisonFirst bool
	}{
		{"empty Keys, after the good record", map[string]events.DynamoDBAttributeValue{}, false},
		{"empty Keys, before the good record", map[string]events.DynamoDBAttributeValue{}, true},
		{"nil Keys", nil, false},
		{"numeric pk and sk", map[string]events.DynamoDBAttributeValue{
			"pk": events.NewNumberAttribute("1"), "sk": events.NewNumberAttribute("2"),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			good := envelope(t, "g", 1, 10)
			goodRec := insertRecord(t, good, "820000000000000000000")
			poison := insertRecord(t, envelope(t, "p", 1, 10), "820000000000000000001")
			poison.Change.NewImage[outbox.AttrSequence] = events.NewStringAttribute("not a number")
			poison.Change.Keys = tt.keys
			recs := []events.DynamoDBEventRecord{goodRec, poison}
			if tt.poisonFirst {
				recs = []events.DynamoDBEventRecord{poison, goodRec}
			}
			f := newRelay(t, &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{})
			resp, err := f.r.Handle(context.Background(), events.DynamoDBEvent{Records: recs})
			if err == nil {
				if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != poison.Change.SequenceNumber {
					t.Fatalf("batchItemFailures = %+v, want exactly the poison record's sequence number %s",
						resp.BatchItemFailures, poison.Change.SequenceNumber)
				}
			}
			if f.eb.sent()[good.EventID] != 1 {
				t.Errorf("good record sent %d times, want 1", f.eb.sent()[good.EventID])
			}
			ups := f.ddb.byPK()
			if u := ups["Order#g"]; !strings.Contains(u, "status = PUBLISHED") {
				t.Errorf("good record not marked published: %q", u)
			}
			if len(ups) != 1 || len(f.sqs.msgs) != 0 {
				t.Errorf("poison record without keys was marked or parked: updates %v, DLQ %+v", ups, f.sqs.msgs)
			}
		})
	}
}

// shortAnswerBus answers every PutEvents with keep result entries (nil
// output when keep < 0), whatever the request held.
type shortAnswerBus struct {
	*fakeEventBridge
	keep int
}

func (b shortAnswerBus) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	out, err := b.fakeEventBridge.PutEvents(ctx, in, opts...)
	if err != nil || b.keep < 0 {
		return nil, err
	}
	out.Entries = out.Entries[:min(b.keep, len(out.Entries))]
	return out, nil
}

// TestPublisherResultCountMismatchIsRetryable: a PutEvents answer whose
// result entries do not match the request's one for one (fewer, or no
// output at all) cannot say which entry was accepted: every entry of the
// request is a retryable failure (CodeNoResult), none is taken as
// published.
func TestPublisherResultCountMismatchIsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		keep    int
		wantMsg string
	}{
		{"one result for two entries", 1, "returned 1 result entries for 2 request entries"},
		{"no result entries", 0, "returned 0 result entries for 2 request entries"},
		{"nil output", -1, "returned 0 result entries for 2 request entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			envs := []outbox.Envelope{envelope(t, "a", 1, 10), envelope(t, "b", 1, 10)}
			bus := shortAnswerBus{fakeEventBridge: &fakeEventBridge{}, keep: tt.keep}
			res := newPublisher(t, bus, func(c *relay.PublisherConfig) { c.MaxAttempts = 2 }).Publish(context.Background(), envs)
			for i, r := range res {
				if r.Status != relay.RetryableFailure || r.ErrorCode != relay.CodeNoResult || r.EventID != "" || r.Attempts != 2 ||
					!strings.Contains(r.ErrorMessage, tt.wantMsg) {
					t.Errorf("entry %d: %+v, want RetryableFailure %s %q after 2 attempts", i, r, relay.CodeNoResult, tt.wantMsg)
				}
			}
		})
	}
}
