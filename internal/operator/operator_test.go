package operator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// fakePublisher records what it was asked to publish and answers with
// results, by event id (default: published as "bus-<event id>").
type fakePublisher struct {
	got     []string
	answers map[string]relay.Result
}

func (p *fakePublisher) Publish(_ context.Context, envs []outbox.Envelope) []relay.Result {
	out := make([]relay.Result, len(envs))
	for i, e := range envs {
		p.got = append(p.got, e.EventID)
		if r, ok := p.answers[e.EventID]; ok {
			out[i] = r
			continue
		}
		out[i] = relay.Result{Status: relay.Published, EventID: "bus-" + e.EventID}
	}
	return out
}

func view(t *testing.T, id, status string, valid bool) EventView {
	t.Helper()
	env := outbox.Envelope{EventID: id, EventType: "OrderPaid", EventVersion: 1, AggregateType: "Order", AggregateID: "o-1",
		Sequence: 2, OccurredAt: time.Unix(1700000000, 0).UTC(), Payload: json.RawMessage(`{"a":1}`)}
	if !valid {
		env.Payload = json.RawMessage(`[1]`)
	}
	r := outbox.NewRecord(env, 0, 4)
	r.Status = status
	return viewOf(r.Item())
}

func TestReplay(t *testing.T) {
	tests := []struct {
		name     string
		views    []EventView
		answers  map[string]relay.Result
		outcomes []string
		sent     []string
		wantErr  bool
	}{
		{"published records are sent, in order",
			[]EventView{view(t, "e1", outbox.StatusPublished, true), view(t, "e2", outbox.StatusPublished, true)}, nil,
			[]string{ReplayPublished, ReplayPublished}, []string{"e1", "e2"}, false},
		{"pending and parked records are skipped",
			[]EventView{view(t, "e1", outbox.StatusPending, true), view(t, "e2", outbox.StatusParked, true), view(t, "e3", outbox.StatusPublished, true)}, nil,
			[]string{ReplaySkipped, ReplaySkipped, ReplayPublished}, []string{"e3"}, false},
		{"an undecodable record is skipped",
			[]EventView{view(t, "e1", outbox.StatusPublished, false)}, nil,
			[]string{ReplaySkipped}, nil, false},
		{"a refused entry fails the replay",
			[]EventView{view(t, "e1", outbox.StatusPublished, true), view(t, "e2", outbox.StatusPublished, true)},
			map[string]relay.Result{"e2": {Status: relay.PermanentFailure, ErrorCode: "MalformedDetail", ErrorMessage: "no", Attempts: 1}},
			[]string{ReplayPublished, ReplayFailed}, []string{"e1", "e2"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub := &fakePublisher{answers: tc.answers}
			res, err := Replay(context.Background(), pub, tc.views)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if strings.Join(pub.got, ",") != strings.Join(tc.sent, ",") {
				t.Fatalf("published %v, want %v", pub.got, tc.sent)
			}
			for i, r := range res {
				if r.Outcome != tc.outcomes[i] {
					t.Errorf("result %d: %s (%s), want %s", i, r.Outcome, r.Reason, tc.outcomes[i])
				}
				if (r.Outcome == ReplayPublished) != (r.BusEventID == "bus-"+r.View.EventID) {
					t.Errorf("result %d: bus event id %q", i, r.BusEventID)
				}
				if r.Outcome != ReplayPublished && r.Reason == "" {
					t.Errorf("result %d: %s without a reason", i, r.Outcome)
				}
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	tests := map[string]string{
		"dev-parked": KindParked, "dev-relay-onfailure": KindStreamFailure, "dev-ledger-dlq": KindConsumerDLQ, "dev-ledger-order-payments-rule-dlq": KindRuleDLQ,
		"dev-ledger": KindConsumerQueue, "Orders-LedgerConsumerQueue-ABC": KindConsumerQueue,
	}
	for name, want := range tests {
		if got := KindOf(name); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", name, got, want)
		}
	}
}

// depthsFake answers GetQueueAttributes from a map by URL.
type depthsFake struct {
	QueueAPI
	attrs map[string]map[string]string
}

func (f depthsFake) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	a, ok := f.attrs[aws.ToString(in.QueueUrl)]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue"}
	}
	return &sqs.GetQueueAttributesOutput{Attributes: a}, nil
}

func TestDepthsKeepsPerQueueErrors(t *testing.T) {
	f := depthsFake{attrs: map[string]map[string]string{
		"https://q/1/dev-parked": {"ApproximateNumberOfMessages": "3", "ApproximateNumberOfMessagesNotVisible": "1"},
	}}
	got := Depths(context.Background(), f, []QueueRef{{KindParked, "https://q/1/dev-parked"}, {KindConsumerDLQ, "https://q/1/gone-dlq"}})
	if len(got) != 2 || got[0].Name != "dev-parked" || got[0].Visible != 3 || got[0].InFlight != 1 || got[0].Err != nil {
		t.Fatalf("first depth %+v", got[0])
	}
	var ae smithy.APIError
	if got[1].Err == nil || !errors.As(got[1].Err, &ae) || got[1].Name != "gone-dlq" {
		t.Fatalf("second depth %+v: want the API error kept", got[1])
	}
}

func TestReadStatusValidates(t *testing.T) {
	tests := []struct {
		opts StatusOptions
		want string
	}{
		{StatusOptions{Shards: 16}, "table is required"},
		{StatusOptions{Table: "t", Shards: 0}, "0 pending shards out of range"},
		{StatusOptions{Table: "t", Shards: 257}, "257 pending shards out of range"},
	}
	for _, tc := range tests {
		if _, err := ReadStatus(context.Background(), nil, nil, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.opts, err, tc.want)
		}
	}
}

// updateFake answers UpdateItem: ConditionalCheckFailed for the keys in
// fail, success otherwise, and records the keys updated.
type updateFake struct {
	fail    map[string]bool
	updated []string
}

func (f *updateFake) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	pk := in.Key[outbox.AttrPK].(*types.AttributeValueMemberS).Value + "/" + in.Key[outbox.AttrSK].(*types.AttributeValueMemberS).Value
	if f.fail[pk] {
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("no")}
	}
	f.updated = append(f.updated, pk)
	return &dynamodb.UpdateItemOutput{}, nil
}

func TestRequeue(t *testing.T) {
	pub := view(t, "e1", outbox.StatusPublished, true)
	raced := view(t, "e2", outbox.StatusPublished, true)
	raced.Key.SK = "raced"
	tests := []struct {
		name     string
		views    []EventView
		outcomes []string
		wantErr  error
	}{
		{"published is requeued", []EventView{pub}, []string{ReplayRequeued}, nil},
		{"pending and parked are skipped", []EventView{view(t, "e3", outbox.StatusPending, true), view(t, "e4", outbox.StatusParked, true)}, []string{ReplaySkipped, ReplaySkipped}, nil},
		{"a record no longer published fails", []EventView{pub, raced}, []string{ReplayRequeued, ReplayFailed}, ErrNotPublished},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &updateFake{fail: map[string]bool{raced.Key.PK + "/raced": true}}
			res, err := Requeue(context.Background(), f, "t", 4, tc.views, time.Now())
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			requeued := 0
			for i, r := range res {
				if r.Outcome != tc.outcomes[i] {
					t.Errorf("result %d: %s (%s), want %s", i, r.Outcome, r.Reason, tc.outcomes[i])
				}
				if r.Outcome == ReplayRequeued {
					requeued++
					if r.Reason != "PENDING in shard "+outbox.PendingShard(r.View.EventID, 4) {
						t.Errorf("result %d reason %q", i, r.Reason)
					}
				}
			}
			if len(f.updated) != requeued {
				t.Errorf("%d updates for %d requeued", len(f.updated), requeued)
			}
		})
	}
	if _, err := Requeue(context.Background(), &updateFake{}, "t", 0, nil, time.Now()); err == nil {
		t.Error("0 shards accepted")
	}
}
