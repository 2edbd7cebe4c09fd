package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
	"github.com/ddb-outbox/ddb-outbox/pkg/streamimage"
)

// fakeEventBridge records PutEvents calls. fail decides, per entry (by its
// envelope event id) and call number (1-based, per event), the ErrorCode to
// return; "" accepts it. callErr, when set, fails whole calls. delay makes
// each call take that long (or until ctx ends: the call then fails with
// ctx's error, like an SDK call, and is not recorded).
type fakeEventBridge struct {
	delay   time.Duration
	mu      sync.Mutex
	calls   [][]ebtypes.PutEventsRequestEntry
	seen    map[string]int
	fail    func(eventID string, attempt int) string
	callErr func(call int) error
	// reject, when set, may refuse a whole request by its entries (e.g. a
	// bus that refuses any request of more than one entry as too large).
	reject func(entries []ebtypes.PutEventsRequestEntry) error
}

func (f *fakeEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if err := wait(ctx, f.delay); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	f.calls = append(f.calls, in.Entries)
	if f.reject != nil {
		if err := f.reject(in.Entries); err != nil {
			return nil, err
		}
	}
	if f.callErr != nil {
		if err := f.callErr(len(f.calls)); err != nil {
			return nil, err
		}
	}
	out := &eventbridge.PutEventsOutput{}
	for _, e := range in.Entries {
		id := detailEventID(e)
		f.seen[id]++
		code := ""
		if f.fail != nil {
			code = f.fail(id, f.seen[id])
		}
		if code != "" {
			out.FailedEntryCount++
			out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("fake " + code)})
			continue
		}
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("bus-" + id)})
	}
	return out, nil
}

// sent returns how often each event id was carried by a call.
func (f *fakeEventBridge) sent() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := map[string]int{}
	for _, c := range f.calls {
		for _, e := range c {
			n[detailEventID(e)]++
		}
	}
	return n
}

func (f *fakeEventBridge) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func detailEventID(e ebtypes.PutEventsRequestEntry) string {
	var env outbox.Envelope
	_ = json.Unmarshal([]byte(aws.ToString(e.Detail)), &env)
	return env.EventID
}

// fakeDDB records UpdateItem calls; fail returns an error for a key. delay
// makes each call take that long (or fail with ctx's error when ctx ends
// first, recording nothing).
type fakeDDB struct {
	delay   time.Duration
	mu      sync.Mutex
	updates []*dynamodb.UpdateItemInput
	fail    func(pk, sk string) error
}

func (f *fakeDDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := wait(ctx, f.delay); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	pk := in.Key[outbox.AttrPK].(*ddbtypes.AttributeValueMemberS).Value
	sk := in.Key[outbox.AttrSK].(*ddbtypes.AttributeValueMemberS).Value
	if f.fail != nil {
		if err := f.fail(pk, sk); err != nil {
			return nil, err
		}
	}
	f.updates = append(f.updates, in)
	return &dynamodb.UpdateItemOutput{}, nil
}

// byPK returns the resolved update expression of each updated record by pk.
func (f *fakeDDB) byPK() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]string{}
	for _, in := range f.updates {
		m[in.Key[outbox.AttrPK].(*ddbtypes.AttributeValueMemberS).Value] = resolve(in)
	}
	return m
}

var placeholder = regexp.MustCompile(`[#:][0-9A-Za-z_]+`)

// resolve substitutes names and values into an UpdateItem's update and
// condition expressions, e.g. "SET status = PUBLISHED ... REMOVE pending_shard | attribute_exists (pk)".
func resolve(in *dynamodb.UpdateItemInput) string {
	s := aws.ToString(in.UpdateExpression) + " | " + aws.ToString(in.ConditionExpression)
	repl := map[string]string{}
	for k, v := range in.ExpressionAttributeNames {
		repl[k] = v
	}
	for k, v := range in.ExpressionAttributeValues {
		switch t := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			repl[k] = t.Value
		case *ddbtypes.AttributeValueMemberN:
			repl[k] = "N:" + t.Value
		default:
			repl[k] = fmt.Sprintf("%T", v)
		}
	}
	s = placeholder.ReplaceAllStringFunc(s, func(k string) string {
		if v, ok := repl[k]; ok {
			return v
		}
		return k
	})
	return strings.ReplaceAll(s, "\n", " ")
}

// fakeSQS records SendMessage calls; err fails them all. delay makes each
// call take that long (or fail with ctx's error when ctx ends first).
type fakeSQS struct {
	delay time.Duration
	mu    sync.Mutex
	msgs  []relay.ParkedMessage
	err   error
}

func (f *fakeSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if err := wait(ctx, f.delay); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var m relay.ParkedMessage
	if err := json.Unmarshal([]byte(aws.ToString(in.MessageBody)), &m); err != nil {
		return nil, err
	}
	f.msgs = append(f.msgs, m)
	return &sqs.SendMessageOutput{MessageId: aws.String("m")}, nil
}

// wait sleeps d, or returns ctx's error if ctx ends first (as an SDK call
// does when its context ends). A done ctx fails at once even for d == 0.
func wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is a relay config with fast retries.
func testConfig() relay.Config {
	return relay.Config{
		Publisher: relay.PublisherConfig{
			EventBusName:    "bus",
			Source:          "test.source",
			InitialInterval: time.Millisecond,
			MaxInterval:     2 * time.Millisecond,
		},
		Marker: relay.MarkerConfig{
			Table:          "outbox",
			ParkedQueueURL: "https://sqs.local/parked",
			Metrics:        io.Discard,
		},
		Logger: quietLogger(),
	}
}

// envelope returns a valid envelope for aggregate id at seq with a payload of
// about payloadBytes bytes.
func envelope(t testing.TB, id string, seq int64, payloadBytes int) outbox.Envelope {
	t.Helper()
	env, err := outbox.NewEnvelope(outbox.Aggregate{Type: "Order", ID: id, Sequence: seq},
		outbox.Event{Type: "OrderPlaced", Version: 1, Payload: map[string]string{"pad": strings.Repeat("x", payloadBytes)}},
		outbox.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// insertRecord builds the stream record Lambda delivers for a new outbox item.
func insertRecord(t testing.TB, env outbox.Envelope, seqNo string) events.DynamoDBEventRecord {
	t.Helper()
	rec := outbox.NewRecord(env, 0, 16)
	img, err := streamimage.FromAttributeValueMap(rec.Item())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := streamimage.FromAttributeValueMap(rec.Key.AttributeValues())
	if err != nil {
		t.Fatal(err)
	}
	return events.DynamoDBEventRecord{
		EventID:     "evt-" + seqNo,
		EventName:   "INSERT",
		EventSource: "aws:dynamodb",
		Change: events.DynamoDBStreamRecord{
			Keys:           keys,
			NewImage:       img,
			SequenceNumber: seqNo,
			StreamViewType: "NEW_IMAGE",
		},
	}
}
