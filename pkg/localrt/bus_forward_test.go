package localrt

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// regionBus is a bus of Region region with a local consumer rule "mine"
// (every event of testSource) and a forwarding rule "forward" of the same
// pattern, whose target is set later (SubscribeBus).
func regionBus(t *testing.T, region string, got *[]events.EventBridgeEvent, mu *sync.Mutex) *Bus {
	t.Helper()
	p := map[string]any{"source": []any{testSource}}
	b, err := NewBus(BusConfig{Name: "bus", Region: region, Logger: slog.New(slog.DiscardHandler),
		TargetRetryBaseDelay: time.Millisecond, TargetRetryMaxDelay: 2 * time.Millisecond,
		Rules: []Rule{{Name: "mine", Target: "mine", Pattern: p},
			{Name: "forward", Target: "forward", Pattern: p, RetryPolicy: &RetryPolicy{MaximumRetryAttempts: 2, MaximumEventAge: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	b.Subscribe("mine", func(_ context.Context, ev events.EventBridgeEvent) error {
		mu.Lock()
		defer mu.Unlock()
		*got = append(*got, ev)
		return nil
	})
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// Two buses forwarding to each other (an event bus target, in another
// Region): an event put on one reaches the other's consumer once, and the
// other's forwarding rule does not send it back (one hop: eb-cross-account); the
// forwarded event keeps source, detail-type, detail and time and becomes an
// event of the receiving bus (its Region, a new id).
func TestBusForwardsOneHop(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var gotA, gotB []events.EventBridgeEvent
	a := regionBus(t, "eu-west-1", &gotA, &mu)
	b := regionBus(t, "eu-central-1", &gotB, &mu)
	a.SubscribeBus("forward", b, b.ARN())
	b.SubscribeBus("forward", a, a.ARN())
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for _, bus := range []*Bus{a, b} {
		out, err := bus.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String("bus"), Source: aws.String(testSource), DetailType: aws.String("Placed"),
			Detail: aws.String(`{"from":"` + bus.cfg.Region + `"}`), Time: aws.Time(at)}}})
		if err != nil || out.FailedEntryCount != 0 {
			t.Fatalf("PutEvents: %v %+v", err, out)
		}
	}
	for range 2 {
		waitIdle(t, a)
		waitIdle(t, b)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range []struct {
		bus    *Bus
		region string
		got    []events.EventBridgeEvent
	}{{a, "eu-west-1", gotA}, {b, "eu-central-1", gotB}} {
		if len(c.got) != 2 {
			t.Fatalf("consumer in %s got %d events, want 2 (its own and the other Region's, once each)", c.region, len(c.got))
		}
		from := map[string]bool{}
		for _, ev := range c.got {
			var d struct{ From string }
			_ = json.Unmarshal(ev.Detail, &d)
			from[d.From] = true
			if ev.Region != c.region || ev.Source != testSource || ev.DetailType != "Placed" || !ev.Time.Equal(at) {
				t.Errorf("event on %s: %+v", c.region, ev)
			}
		}
		if !from["eu-west-1"] || !from["eu-central-1"] {
			t.Errorf("consumer in %s got events from %v", c.region, from)
		}
		if fe := c.bus.ForwardedEvents(); len(fe) != 1 || strings.Contains(string(fe[0]), `"from":"`+c.region+`"`) {
			t.Errorf("bus in %s: forwarded events %s, want the other Region's one", c.region, fe)
		}
		st := c.bus.Stats()
		if st.Accepted != 2 || st.Forwarded != 1 || st.Deliveries["forward"] != 1 || st.Attempts["forward"] != 1 || st.NotForwardedAgain != 1 {
			t.Errorf("bus in %s: accepted %d (want 2), forwarded in %d (want 1), forwarded out %d in %d attempts (want 1, 1), not forwarded again %d (want 1)",
				c.region, st.Accepted, st.Forwarded, st.Deliveries["forward"], st.Attempts["forward"], st.NotForwardedAgain)
		}
	}
}

// failingBus is an event bus target that fails every PutEvents: with err
// (a request error), or else with the entry error code.
type failingBus struct {
	calls atomic.Int64
	err   error
	code  string
}

func (f *failingBus) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	return &eventbridge.PutEventsOutput{FailedEntryCount: 1, Entries: []ebtypes.PutEventsResultEntry{{ErrorCode: aws.String(f.code), ErrorMessage: aws.String("refused")}}}, nil
}

// A forwarding rule's target is retried by the rule's RetryPolicy — until
// its retries or its event age run out, whichever first — and a refusal for
// good (a bus that does not exist, an entry it will never take) is not
// retried; each ends on the rule's DLQ with EventBridge's attributes.
func TestBusTargetRetryPolicyAndDLQ(t *testing.T) {
	t.Parallel()
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
	tests := []struct {
		name      string
		policy    RetryPolicy
		target    *failingBus
		minCalls  int64
		maxCalls  int64
		code      string
		exhausted string
	}{
		{"retries run out", RetryPolicy{MaximumRetryAttempts: 3, MaximumEventAge: time.Hour}, &failingBus{err: throttled}, 4, 4,
			sqsconsumer.RuleErrorThrottling, sqsconsumer.ExhaustedMaximumRetryAttempts},
		{"no retries", RetryPolicy{MaximumRetryAttempts: 0, MaximumEventAge: time.Hour}, &failingBus{code: "InternalFailure"}, 1, 1,
			sqsconsumer.RuleErrorFromTarget, sqsconsumer.ExhaustedMaximumRetryAttempts},
		{"age runs out", RetryPolicy{MaximumRetryAttempts: MaxRuleRetryAttempts, MaximumEventAge: 150 * time.Millisecond}, &failingBus{err: throttled}, 2, 100,
			sqsconsumer.RuleErrorThrottling, sqsconsumer.ExhaustedMaximumEventAge},
		{"bus does not exist", DefaultRetryPolicy(), &failingBus{err: &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "Event bus x does not exist."}}, 1, 1,
			sqsconsumer.RuleErrorNoResource, ""},
		{"entry refused for good", DefaultRetryPolicy(), &failingBus{code: ErrorCodeMalformedDetail}, 1, 1,
			sqsconsumer.RuleErrorInvalidParameter, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := NewBus(BusConfig{Name: "bus", Logger: slog.New(slog.DiscardHandler),
				TargetRetryBaseDelay: 5 * time.Millisecond, TargetRetryMaxDelay: 10 * time.Millisecond,
				Rules: []Rule{{Name: "fwd", Target: "fwd", Pattern: map[string]any{"source": []any{testSource}}, RetryPolicy: &tc.policy}}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			b.SubscribeBus("fwd", tc.target, "arn:aws:events:eu-central-1:000000000000:event-bus/other")
			dlq := newRuleDLQ(t, b, "fwd")
			if out, err := b.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
				{EventBusName: aws.String("bus"), Source: aws.String(testSource), DetailType: aws.String("Placed"), Detail: aws.String(`{}`)}}}); err != nil || out.FailedEntryCount != 0 {
				t.Fatalf("PutEvents: %v %+v", err, out)
			}
			waitIdle(t, b)
			if n := tc.target.calls.Load(); n < tc.minCalls || n > tc.maxCalls {
				t.Errorf("target called %d times, want %d..%d", n, tc.minCalls, tc.maxCalls)
			}
			msgs, err := dlq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.URL()), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
			if err != nil || len(msgs.Messages) != 1 {
				t.Fatalf("rule DLQ: %v, %d messages, want 1", err, len(msgs.Messages))
			}
			m := msgs.Messages[0]
			if got, _ := attr(m, sqsconsumer.AttrErrorCode); got != tc.code {
				t.Errorf("ERROR_CODE %q, want %q", got, tc.code)
			}
			if got, _ := attr(m, sqsconsumer.AttrTargetARN); !strings.HasSuffix(got, ":event-bus/other") {
				t.Errorf("TARGET_ARN %q, want the target bus's ARN", got)
			}
			got, ok := attr(m, sqsconsumer.AttrExhaustedRetryCondition)
			if tc.exhausted == "" && ok || got != tc.exhausted {
				t.Errorf("EXHAUSTED_RETRY_CONDITION %q (present %v), want %q", got, ok, tc.exhausted)
			}
			if got, _ := attr(m, sqsconsumer.AttrRetryAttempts); got != strconv.FormatInt(tc.target.calls.Load()-1, 10) {
				t.Errorf("RETRY_ATTEMPTS %q, want %d", got, tc.target.calls.Load()-1)
			}
		})
	}
}

// NewBus refuses a retry policy EventBridge refuses.
func TestBusRefusesInvalidRetryPolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []RetryPolicy{{MaximumRetryAttempts: -1, MaximumEventAge: time.Hour}, {MaximumRetryAttempts: 186, MaximumEventAge: time.Hour},
		{MaximumRetryAttempts: 1}, {MaximumRetryAttempts: 1, MaximumEventAge: 25 * time.Hour}} {
		_, err := NewBus(BusConfig{Logger: slog.New(slog.DiscardHandler), Rules: []Rule{{Name: "r", Target: "t", Pattern: `{"source":["s"]}`, RetryPolicy: &p}}})
		if err == nil || !strings.Contains(err.Error(), "rule r") {
			t.Errorf("policy %+v: NewBus = %v, want an error naming the rule", p, err)
		}
	}
}
