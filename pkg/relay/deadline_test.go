package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestHandleAnswersBeforeTheDeadline: 5 records, 2 accepted by PutEvents
// and 3 throttled for good (plus, in some cases, one EventBridge rejects for
// good), PutEvents calls of 200 ms, marking calls of 600 ms, and an
// invocation deadline of a few seconds. On AWS an answer after the deadline
// is lost and the whole batch comes again, so Handle must answer before the
// deadline, and every record before the reported one must be done (marked
// PUBLISHED or PARKED): nothing throttled or unmarked is acknowledged.
// Each case runs several times (backoff jitter varies).
func TestHandleAnswersBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		deadline time.Duration
		batch    bool          // the client has BatchExecuteStatement
		park     bool          // add a record EventBridge rejects for good
		reserve  time.Duration // MarkerConfig.Reserve; 0 = default (2.5 s here)
		// allMarked: every accepted record is marked (not merely reported).
		allMarked bool
		// noPublish: the reserve leaves no time to publish at all.
		noPublish bool
	}{
		{name: "4s UpdateItem marking", deadline: 4 * time.Second, allMarked: true},
		{name: "4s batch marking", deadline: 4 * time.Second, batch: true, allMarked: true},
		{name: "4s with a park", deadline: 4 * time.Second, park: true, allMarked: true},
		{name: "3s with a park", deadline: 3 * time.Second, park: true, allMarked: true},
		{name: "6s batch with a park", deadline: 6 * time.Second, batch: true, park: true, allMarked: true},
		{name: "2s no time to publish", deadline: 2 * time.Second, park: true, noPublish: true},
		{name: "4s reserve too small to mark", deadline: 4 * time.Second, park: true, reserve: 700 * time.Millisecond},
	}
	for _, c := range cases {
		for round := range 3 {
			t.Run(fmt.Sprintf("%s/%d", c.name, round), func(t *testing.T) {
				t.Parallel()
				runDeadlineCase(t, c.deadline, c.batch, c.park, c.reserve, c.allMarked, c.noPublish)
			})
		}
	}
}

func runDeadlineCase(t *testing.T, deadline time.Duration, batch, park bool, reserve time.Duration, allMarked, noPublish bool) {
	type kind int
	const (
		accepted kind = iota
		throttled
		rejected
	)
	kinds := []kind{accepted, throttled, accepted, throttled, throttled}
	if park {
		kinds = append([]kind{rejected}, kinds...)
	}
	envs := make([]outbox.Envelope, len(kinds))
	byID := map[string]kind{}
	var ev events.DynamoDBEvent
	for i, k := range kinds {
		envs[i] = envelope(t, fmt.Sprintf("agg%d", i), 1, 10)
		byID[envs[i].EventID] = k
		ev.Records = append(ev.Records, insertRecord(t, envs[i], fmt.Sprintf("7000000000000000000%02d", i)))
	}
	eb := &fakeEventBridge{delay: 200 * time.Millisecond, fail: func(id string, _ int) string {
		switch byID[id] {
		case throttled:
			return "ThrottlingException"
		case rejected:
			return "MalformedDetail"
		}
		return ""
	}}
	const markDelay = 600 * time.Millisecond
	ddb := &batchDDB{fakeDDB: fakeDDB{delay: markDelay}}
	var client relay.UpdateItemAPI = &ddb.fakeDDB
	if batch {
		client = ddb
	}
	q := &fakeSQS{delay: markDelay}
	cfg := testConfig()
	cfg.Publisher.MaxAttempts = 20
	cfg.Publisher.InitialInterval = 50 * time.Millisecond
	cfg.Publisher.MaxInterval = 50 * time.Millisecond
	cfg.Publisher.CallTimeout = time.Second
	cfg.Marker.CallTimeout = time.Second
	cfg.Marker.Reserve = reserve
	r, err := relay.New(eb, client, q, cfg)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	end, _ := ctx.Deadline()
	resp, err := r.Handle(ctx, ev)
	// The behaviour under test: the answer arrives before the deadline.
	if answered := time.Now(); !answered.Before(end) {
		t.Fatalf("Handle answered %s after the invocation deadline", answered.Sub(end))
	}
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if len(resp.BatchItemFailures) != 1 {
		t.Fatalf("batchItemFailures = %+v, want exactly one (throttled records are never done)", resp.BatchItemFailures)
	}
	reported := -1
	for i, rec := range ev.Records {
		if rec.Change.SequenceNumber == resp.BatchItemFailures[0].ItemIdentifier {
			reported = i
		}
	}
	if reported < 0 {
		t.Fatalf("reported %q is not in the batch", resp.BatchItemFailures[0].ItemIdentifier)
	}

	marked := map[string]string{} // pk -> PUBLISHED or PARKED
	for pk, u := range ddb.byPK() {
		switch {
		case strings.Contains(u, "status = PUBLISHED"):
			marked[pk] = outbox.StatusPublished
		case strings.Contains(u, "status = PARKED"):
			marked[pk] = outbox.StatusParked
		}
	}
	for _, b := range ddb.batches {
		for _, st := range b {
			marked[st.Parameters[4].(*ddbtypes.AttributeValueMemberS).Value] = outbox.StatusPublished
		}
	}
	parkedMsgs := map[string]bool{}
	for _, m := range q.msgs {
		parkedMsgs[m.EventID] = true
	}
	sent := eb.sent()
	for i, env := range envs {
		pk := "Order#" + env.AggregateID
		k := byID[env.EventID]
		if i < reported { // acknowledged: must be done
			switch {
			case k == throttled:
				t.Errorf("record %d (throttled, never accepted) acknowledged", i)
			case k == accepted && marked[pk] != outbox.StatusPublished:
				t.Errorf("record %d accepted but acknowledged without being marked PUBLISHED", i)
			case k == rejected && (marked[pk] != outbox.StatusParked || !parkedMsgs[env.EventID]):
				t.Errorf("record %d rejected but acknowledged without being parked", i)
			}
		}
		if allMarked && k == accepted && marked[pk] != outbox.StatusPublished {
			t.Errorf("record %d accepted by EventBridge but not marked: the reserve left no time to mark", i)
		}
		if allMarked && k == rejected && marked[pk] != outbox.StatusParked {
			t.Errorf("record %d rejected for good but not parked: the reserve left no time to park", i)
		}
		if noPublish && sent[env.EventID] != 0 {
			t.Errorf("record %d sent although the reserve left no time to publish", i)
		}
	}
	if noPublish && reported != 0 {
		t.Errorf("reported record %d, want 0 (nothing could be published)", reported)
	}
}

func TestMinFunctionTimeout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  relay.Config
		want time.Duration
	}{
		// 20 s retry budget + (2 × 5 s + 0.5 s) reserve + 1 s margin = 31.5 s.
		{"defaults", relay.Config{}, 32 * time.Second},
		{"custom call timeout", relay.Config{Publisher: relay.PublisherConfig{Source: "com.example.test", RetryBudget: 10 * time.Second}, Marker: relay.MarkerConfig{CallTimeout: 2 * time.Second}}, 16 * time.Second},
		{"explicit reserve", relay.Config{Publisher: relay.PublisherConfig{Source: "com.example.test", RetryBudget: 5 * time.Second}, Marker: relay.MarkerConfig{Reserve: 3 * time.Second}}, 9 * time.Second},
	}
	for _, c := range cases {
		if got := relay.MinFunctionTimeout(c.cfg); got != c.want {
			t.Errorf("%s: MinFunctionTimeout = %s, want %s", c.name, got, c.want)
		}
	}
	if got := relay.DefaultReserve(0); got != 10*time.Second+relay.AnswerMargin {
		t.Errorf("DefaultReserve(0) = %s", got)
	}
}

func TestReserveMustExceedAnswerMargin(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Marker.Reserve = relay.AnswerMargin
	if _, err := relay.New(&fakeEventBridge{}, &fakeDDB{}, &fakeSQS{}, cfg); err == nil || !strings.Contains(err.Error(), "Reserve") {
		t.Errorf("New with Reserve = AnswerMargin: %v, want a Reserve error", err)
	}
}

// TestPublishNeverOutlivesItsBudget: a PutEvents call still in flight when
// RetryBudget ends is cut, and its entries are RetryableFailure.
func TestPublishNeverOutlivesItsBudget(t *testing.T) {
	t.Parallel()
	p, err := relay.NewPublisher(&fakeEventBridge{delay: 5 * time.Second}, relay.PublisherConfig{Source: "com.example.test",
		EventBusName: "bus", RetryBudget: 300 * time.Millisecond, CallTimeout: 10 * time.Second, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := p.Publish(ctx, []outbox.Envelope{envelope(t, "slow", 1, 10)})
	if ctx.Err() != nil {
		t.Fatal("Publish ran past its 300 ms retry budget to the 2 s test deadline")
	}
	if res[0].Status != relay.RetryableFailure {
		t.Errorf("result = %+v, want RetryableFailure", res[0])
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	res = p.Publish(done, []outbox.Envelope{envelope(t, "late", 1, 10)})
	if res[0].Status != relay.RetryableFailure || res[0].ErrorCode != relay.CodeNoTime || res[0].Attempts != 0 {
		t.Errorf("done context: result = %+v, want RetryableFailure %s, never sent", res[0], relay.CodeNoTime)
	}
}
