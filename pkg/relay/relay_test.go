package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

func newPublisher(t *testing.T, eb relay.EventBridgeAPI, mod func(*relay.PublisherConfig)) *relay.Publisher {
	t.Helper()
	cfg := testConfig().Publisher
	cfg.Logger = quietLogger()
	if mod != nil {
		mod(&cfg)
	}
	p, err := relay.NewPublisher(eb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPublisherPartialFailure(t *testing.T) {
	t.Parallel()
	envs := make([]outbox.Envelope, 5)
	for i := range envs {
		envs[i] = envelope(t, fmt.Sprint("o", i), 1, 10)
	}
	// First attempt: 1 throttled, 3 internal failure, 4 malformed (permanent).
	eb := &fakeEventBridge{fail: func(id string, attempt int) string {
		switch {
		case id == envs[1].EventID && attempt == 1:
			return "ThrottlingException"
		case id == envs[3].EventID && attempt == 1:
			return "InternalFailure"
		case id == envs[4].EventID:
			return "MalformedDetail"
		}
		return ""
	}}
	res := newPublisher(t, eb, nil).Publish(context.Background(), envs)

	want := []relay.PublishStatus{relay.Published, relay.Published, relay.Published, relay.Published, relay.PermanentFailure}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("entry %d: status %v (%s), want %v", i, r.Status, r.ErrorCode, want[i])
		}
		if r.Status == relay.Published && r.EventID != "bus-"+envs[i].EventID {
			t.Errorf("entry %d: EventID %q", i, r.EventID)
		}
	}
	if res[4].ErrorCode != "MalformedDetail" {
		t.Errorf("entry 4 code %q", res[4].ErrorCode)
	}
	sent := eb.sent()
	for i, n := range []int{1, 2, 1, 2, 1} {
		if sent[envs[i].EventID] != n {
			t.Errorf("entry %d sent %d times, want %d (accepted entries must not be re-sent, permanent ones not retried)", i, sent[envs[i].EventID], n)
		}
	}
	if eb.callCount() != 2 {
		t.Fatalf("calls = %d, want 2", eb.callCount())
	}
	if got := len(eb.calls[1]); got != 2 {
		t.Fatalf("second call carried %d entries, want only the 2 retryable failures", got)
	}
}

func TestPublisherEntryFields(t *testing.T) {
	t.Parallel()
	env := envelope(t, "o1", 3, 10)
	eb := &fakeEventBridge{}
	newPublisher(t, eb, nil).Publish(context.Background(), []outbox.Envelope{env})
	e := eb.calls[0][0]
	detail, _ := env.Detail()
	switch {
	case aws.ToString(e.Source) != "test.source":
		t.Errorf("Source %q", aws.ToString(e.Source))
	case aws.ToString(e.DetailType) != "OrderPlaced":
		t.Errorf("DetailType %q", aws.ToString(e.DetailType))
	case aws.ToString(e.Detail) != string(detail):
		t.Errorf("Detail %q", aws.ToString(e.Detail))
	case aws.ToString(e.EventBusName) != "bus":
		t.Errorf("EventBusName %q", aws.ToString(e.EventBusName))
	case !aws.ToTime(e.Time).Equal(env.OccurredAt):
		t.Errorf("Time %v, want %v", aws.ToTime(e.Time), env.OccurredAt)
	}
}

func TestPublisherBatching(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		n, payload  int
		wantCalls   int
		wantPerCall int
	}{
		{"25 small entries: calls of at most 10", 25, 10, 3, 10},
		{"6 entries of ~100 KB: at most 256 KB per call", 6, 100 * 1024, 3, 2},
		{"4 entries of ~60 KB", 4, 60 * 1024, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			envs := make([]outbox.Envelope, tt.n)
			for i := range envs {
				envs[i] = envelope(t, fmt.Sprint("o", i), 1, tt.payload)
			}
			eb := &fakeEventBridge{}
			p := newPublisher(t, eb, func(c *relay.PublisherConfig) { c.Concurrency = 1 })
			for i, r := range p.Publish(context.Background(), envs) {
				if r.Status != relay.Published {
					t.Fatalf("entry %d: %v %s", i, r.Status, r.ErrorMessage)
				}
			}
			if eb.callCount() != tt.wantCalls {
				t.Fatalf("calls = %d, want %d", eb.callCount(), tt.wantCalls)
			}
			for i, c := range eb.calls {
				size := 0
				for _, e := range c {
					size += outbox.EntrySize(aws.ToString(e.Source), aws.ToString(e.DetailType), []byte(aws.ToString(e.Detail)))
				}
				if len(c) > relay.MaxEntriesPerRequest || len(c) > tt.wantPerCall || size > relay.DefaultMaxRequestBytes {
					t.Errorf("call %d: %d entries, %d bytes", i, len(c), size)
				}
			}
		})
	}
}

func TestPack(t *testing.T) {
	t.Parallel()
	got := relay.Pack([]int{100, 100, 100, 50, 50, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10}, 200)
	want := [][2]int{{0, 2}, {2, 5}, {5, 15}, {15, 16}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Pack = %v, want %v", got, want)
	}
}

func TestPublisherOversizedEntryNotSent(t *testing.T) {
	t.Parallel()
	big := envelope(t, "big", 1, 300*1024)
	small := envelope(t, "small", 1, 10)
	eb := &fakeEventBridge{}
	res := newPublisher(t, eb, nil).Publish(context.Background(), []outbox.Envelope{big, small})
	if res[0].Status != relay.PermanentFailure || res[0].ErrorCode != relay.CodeEntryTooLarge || res[0].Attempts != 0 {
		t.Fatalf("oversized: %+v", res[0])
	}
	if res[1].Status != relay.Published {
		t.Fatalf("small: %+v", res[1])
	}
	if eb.sent()[big.EventID] != 0 {
		t.Fatal("oversized entry was sent to EventBridge")
	}
}

func TestPublisherRetriesAreBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		eb       *fakeEventBridge
		wantCode string
	}{
		{"whole-call error", &fakeEventBridge{callErr: func(int) error {
			return &smithy.GenericAPIError{Code: "ServiceUnavailable", Message: "down"}
		}}, "ServiceUnavailable"},
		{"unknown entry code", &fakeEventBridge{fail: func(string, int) string { return "SomethingNew" }}, "SomethingNew"},
		{"throttled forever", &fakeEventBridge{fail: func(string, int) string { return "ThrottlingException" }}, "ThrottlingException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := envelope(t, "o", 1, 10)
			res := newPublisher(t, tt.eb, func(c *relay.PublisherConfig) { c.MaxAttempts = 3 }).Publish(context.Background(), []outbox.Envelope{env})
			if res[0].Status != relay.RetryableFailure || res[0].ErrorCode != tt.wantCode || res[0].Attempts != 3 {
				t.Fatalf("result %+v", res[0])
			}
			if tt.eb.callCount() != 3 {
				t.Fatalf("calls = %d, want 3", tt.eb.callCount())
			}
		})
	}
}

// relayFixture wires a Relay to fakes.
type relayFixture struct {
	eb  *fakeEventBridge
	ddb *fakeDDB
	sqs *fakeSQS
	r   *relay.Relay
}

func newRelay(t *testing.T, eb *fakeEventBridge, ddb *fakeDDB, q *fakeSQS) relayFixture {
	t.Helper()
	cfg := testConfig()
	cfg.Publisher.MaxAttempts = 2
	r, err := relay.New(eb, ddb, q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return relayFixture{eb: eb, ddb: ddb, sqs: q, r: r}
}

func TestHandleAllPublished(t *testing.T) {
	t.Parallel()
	f := newRelay(t, &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{})
	var ev events.DynamoDBEvent
	var envs []outbox.Envelope
	for i := range 3 {
		env := envelope(t, fmt.Sprint("o", i), 1, 10)
		envs = append(envs, env)
		ev.Records = append(ev.Records, insertRecord(t, env, fmt.Sprintf("1000000000000000000000%d", i)))
	}
	resp, err := f.r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	ups := f.ddb.byPK()
	for _, env := range envs {
		u := ups["Order#"+env.AggregateID]
		for _, want := range []string{"status = PUBLISHED", "expires_at = N:", "bus_event_id = bus-" + env.EventID, "published_at = ", "REMOVE pending_shard", "attribute_exists (pk)"} {
			if !strings.Contains(u, want) {
				t.Errorf("update of %s = %q, missing %q", env.AggregateID, u, want)
			}
		}
	}
}

func TestHandleIgnoredRecords(t *testing.T) {
	t.Parallel()
	env := envelope(t, "o1", 1, 10)
	ins := insertRecord(t, env, "200000000000000000001")
	modify := ins
	modify.EventName = "MODIFY"
	remove := ins
	remove.EventName = "REMOVE"
	remove.Change.OldImage, remove.Change.NewImage = ins.Change.NewImage, nil
	ttl := remove
	ttl.UserIdentity = &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	foreign := ins
	foreign.Change.NewImage = map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("Customer#1")}

	tests := []struct {
		name string
		rec  events.DynamoDBEventRecord
	}{{"MODIFY", modify}, {"REMOVE", remove}, {"TTL REMOVE", ttl}, {"foreign item", foreign}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRelay(t, &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{})
			resp, err := f.r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{tt.rec}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("resp %+v, err %v", resp, err)
			}
			if f.eb.callCount() != 0 || len(f.ddb.updates) != 0 || len(f.sqs.msgs) != 0 {
				t.Fatalf("ignored record caused calls: eb %d ddb %d sqs %d", f.eb.callCount(), len(f.ddb.updates), len(f.sqs.msgs))
			}
		})
	}
}

func TestHandleFirstNotDoneSequenceNumber(t *testing.T) {
	t.Parallel()
	envs := make([]outbox.Envelope, 4)
	var ev events.DynamoDBEvent
	for i := range envs {
		envs[i] = envelope(t, fmt.Sprint("o", i), 1, 10)
		ev.Records = append(ev.Records, insertRecord(t, envs[i], fmt.Sprintf("30000000000000000000%d", i)))
	}
	// A MODIFY record first, to check ignored records are not reported.
	mod := ev.Records[0]
	mod.EventName, mod.Change.SequenceNumber = "MODIFY", "299999999999999999999"
	ev.Records = append([]events.DynamoDBEventRecord{mod}, ev.Records...)

	tests := []struct {
		name    string
		eb      *fakeEventBridge
		ddb     *fakeDDB
		wantSeq string
		marked  []int
	}{
		{
			name: "records 1 and 3 throttled: report record 1",
			eb: &fakeEventBridge{fail: func(id string, _ int) string {
				return map[bool]string{true: "ThrottlingException"}[id == envs[1].EventID || id == envs[3].EventID]
			}},
			ddb:     &fakeDDB{},
			wantSeq: "300000000000000000001",
			marked:  []int{0, 2},
		},
		{
			name: "marking of record 2 fails: report record 2",
			eb:   &fakeEventBridge{},
			ddb: &fakeDDB{fail: func(pk, _ string) error {
				if pk == "Order#o2" {
					return errors.New("boom")
				}
				return nil
			}},
			wantSeq: "300000000000000000002",
			marked:  []int{0, 1, 3},
		},
		{
			name:    "whole PutEvents call fails: report the first outbox record",
			eb:      &fakeEventBridge{callErr: func(int) error { return errors.New("timeout") }},
			ddb:     &fakeDDB{},
			wantSeq: "300000000000000000000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newRelay(t, tt.eb, tt.ddb, &fakeSQS{})
			resp, err := f.r.Handle(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != tt.wantSeq {
				t.Fatalf("batchItemFailures = %+v, want exactly [%s]", resp.BatchItemFailures, tt.wantSeq)
			}
			ups := f.ddb.byPK()
			if len(ups) != len(tt.marked) {
				t.Fatalf("marked %d records, want %d: %v", len(ups), len(tt.marked), ups)
			}
			for _, i := range tt.marked {
				if _, ok := ups["Order#"+envs[i].AggregateID]; !ok {
					t.Errorf("record %d not marked", i)
				}
			}
			for pk, u := range ups {
				if !strings.Contains(u, "status = PUBLISHED") {
					t.Errorf("%s: %s", pk, u)
				}
			}
		})
	}
}

func TestHandlePermanentFailureParked(t *testing.T) {
	t.Parallel()
	bad := envelope(t, "bad", 7, 10)
	good := envelope(t, "good", 1, 10)
	big := envelope(t, "big", 2, 300*1024)
	eb := &fakeEventBridge{fail: func(id string, _ int) string {
		if id == bad.EventID {
			return "NotAuthorizedForSourceException"
		}
		return ""
	}}
	f := newRelay(t, eb, &fakeDDB{}, &fakeSQS{})
	ev := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		insertRecord(t, bad, "400000000000000000001"),
		insertRecord(t, good, "400000000000000000002"),
		insertRecord(t, big, "400000000000000000003"),
	}}
	resp, err := f.r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if eb.sent()[bad.EventID] != 1 {
		t.Errorf("permanent failure sent %d times, want 1 (no retry)", eb.sent()[bad.EventID])
	}
	if eb.sent()[big.EventID] != 0 {
		t.Error("oversized entry was sent")
	}
	if len(f.sqs.msgs) != 2 {
		t.Fatalf("DLQ got %d messages, want 2", len(f.sqs.msgs))
	}
	byID := map[string]relay.ParkedMessage{}
	for _, m := range f.sqs.msgs {
		byID[m.EventID] = m
	}
	m := byID[bad.EventID]
	if m.Envelope == nil || m.Envelope.EventID != bad.EventID || m.Envelope.Sequence != 7 || !bytes.Equal(m.Envelope.Payload, bad.Payload) ||
		m.ErrorCode != "NotAuthorizedForSourceException" || m.Table != "outbox" || m.PK != "Order#bad" {
		t.Errorf("DLQ message = %+v", m)
	}
	if mb := byID[big.EventID]; mb.ErrorCode != relay.CodeEntryTooLarge || !mb.Truncated || mb.Envelope == nil {
		t.Errorf("oversized DLQ message = %+v", mb)
	}
	ups := f.ddb.byPK()
	for _, pk := range []string{"Order#bad", "Order#big"} {
		u := ups[pk]
		for _, want := range []string{"status = PARKED", "parked_reason = ", "parked_at = ", "REMOVE", "pending_shard", "expires_at"} {
			if !strings.Contains(u, want) {
				t.Errorf("%s update %q missing %q", pk, u, want)
			}
		}
		if strings.Contains(u, "expires_at = N:") {
			t.Errorf("%s: parked record got a TTL: %s", pk, u)
		}
	}
	if !strings.Contains(ups["Order#good"], "status = PUBLISHED") {
		t.Errorf("good record: %s", ups["Order#good"])
	}
	if got := f.r.Marker().Parked(); got != 2 {
		t.Errorf("Parked() = %d, want 2", got)
	}
}

func TestHandleParkFailsWhenDLQFails(t *testing.T) {
	t.Parallel()
	bad := envelope(t, "bad", 1, 10)
	eb := &fakeEventBridge{fail: func(string, int) string { return "MalformedDetail" }}
	f := newRelay(t, eb, &fakeDDB{}, &fakeSQS{err: errors.New("sqs down")})
	resp, err := f.r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{insertRecord(t, bad, "500000000000000000001")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "500000000000000000001" {
		t.Fatalf("resp %+v", resp)
	}
	if len(f.ddb.updates) != 0 {
		t.Fatal("record marked PARKED although the DLQ send failed")
	}
}

func TestHandlePoisonRecordParked(t *testing.T) {
	t.Parallel()
	env := envelope(t, "p", 1, 10)
	rec := insertRecord(t, env, "600000000000000000001")
	rec.Change.NewImage[outbox.AttrSequence] = events.NewStringAttribute("not a number")
	f := newRelay(t, &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{})
	resp, err := f.r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if f.eb.callCount() != 0 {
		t.Fatal("poison record was published")
	}
	if len(f.sqs.msgs) != 1 || f.sqs.msgs[0].ErrorCode != relay.CodePoisonRecord || len(f.sqs.msgs[0].Image) == 0 || f.sqs.msgs[0].SK != rec.Change.Keys["sk"].String() {
		t.Fatalf("DLQ = %+v", f.sqs.msgs)
	}
	var img map[string]events.DynamoDBAttributeValue
	if err := json.Unmarshal(f.sqs.msgs[0].Image, &img); err != nil || img[outbox.AttrEventID].String() != env.EventID {
		t.Fatalf("DLQ image does not round-trip: %v", err)
	}
	if u := f.ddb.byPK()["Order#p"]; !strings.Contains(u, "status = PARKED") {
		t.Fatalf("update %q", u)
	}
}

func TestHandleKeysOnlyIsAnError(t *testing.T) {
	t.Parallel()
	for _, view := range []string{"KEYS_ONLY", "OLD_IMAGE"} {
		rec := insertRecord(t, envelope(t, "k", 1, 10), "700000000000000000001")
		rec.Change.NewImage, rec.Change.StreamViewType = nil, view
		good := insertRecord(t, envelope(t, "g", 1, 10), "700000000000000000000")
		f := newRelay(t, &fakeEventBridge{}, &fakeDDB{}, &fakeSQS{})
		_, err := f.r.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{good, rec}})
		if !errors.Is(err, relay.ErrNoNewImage) || !strings.Contains(err.Error(), view) {
			t.Fatalf("%s: err = %v, want ErrNoNewImage", view, err)
		}
		if f.eb.callCount() != 0 || len(f.ddb.updates) != 0 {
			t.Fatalf("%s: calls made before the configuration error", view)
		}
	}
}

func TestMarkPublishedMissingRecordIsDone(t *testing.T) {
	t.Parallel()
	ddb := &fakeDDB{fail: func(string, string) error {
		return &ddbtypes.ConditionalCheckFailedException{Message: aws.String("gone")}
	}}
	cfg := testConfig().Marker
	cfg.Logger = quietLogger()
	m, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MarkPublished(context.Background(), outbox.Key{PK: "a", SK: "b"}, outbox.Envelope{EventID: "e"}, "bus"); err != nil {
		t.Fatalf("MarkPublished on a deleted record: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := relay.New(&fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}, relay.Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
	cfg := testConfig()
	cfg.Publisher.MaxRequestBytes = 2048
	if _, err := relay.New(&fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}, cfg); err == nil {
		t.Fatal("MaxRequestBytes below MaxEntryBytes accepted")
	}
}

func TestEMF(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	relay.NewEMF(&buf, "outbox").Emit(map[string]relay.Metric{"PendingCount": {Value: 3, Unit: relay.UnitCount}})
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	aws := line["_aws"].(map[string]any)
	cw := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if cw["Namespace"] != "DdbOutbox" || line["PendingCount"] != 3.0 || line["OutboxTable"] != "outbox" {
		t.Fatalf("EMF line %s", buf.String())
	}
}
