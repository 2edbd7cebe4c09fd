package operator

import (
	"context"
	"encoding/json"
	"errors"
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
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

const (
	dlqTestSource = "com.ddb-outbox.orders"
	dlqTestRule   = "notifier-order-events"
	dlqTestTarget = "notifier"
)

// refusingQueue is a consumer queue that refuses EventBridge's sends while
// refuse is set, as SQS does when the queue's KMS key is disabled (the
// KMS.DisabledException of API_SendMessage); the operator's sends go
// through the same queue once the key is back.
type refusingQueue struct {
	*localrt.SQSQueue
	refuse atomic.Bool
}

func (q *refusingQueue) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if q.refuse.Load() {
		return nil, &smithy.GenericAPIError{Code: "KMS.DisabledException", Message: "The request was rejected because the specified CMK is not enabled.", Fault: smithy.FaultClient}
	}
	return q.SQSQueue.SendMessage(ctx, in, o...)
}

// ruleDLQWorld is a bus with the notifier's rule, its target queue (which
// can refuse) and the rule's DLQ as the stack makes it (its policy admits
// the rule only), all real local SQS queues.
type ruleDLQWorld struct {
	bus   *localrt.Bus
	queue *refusingQueue
	dlq   *localrt.SQSQueue
}

// newRuleDLQWorld builds the world; restricted gives the DLQ the stack's
// policy (only the rule may send), else any local caller may send to it.
func newRuleDLQWorld(t *testing.T, restricted bool) *ruleDLQWorld {
	t.Helper()
	bus, err := localrt.NewBus(localrt.BusConfig{Name: "orders-bus", Logger: slog.New(slog.DiscardHandler),
		TargetRetryBaseDelay: time.Millisecond, TargetRetryMaxDelay: 2 * time.Millisecond,
		Rules: []localrt.Rule{{Name: dlqTestRule, Target: dlqTestTarget, Pattern: map[string]any{"source": []any{dlqTestSource}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close(context.Background()) })
	q, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: "orders-notifier"})
	if err != nil {
		t.Fatal(err)
	}
	dlqCfg := localrt.SQSQueueConfig{Name: RuleDLQName("orders", dlqTestRule)}
	if restricted {
		dlqCfg.OnlySourceArns = []string{bus.RuleARN(dlqTestRule)}
	}
	dlq := mustQueue(t, dlqCfg)
	w := &ruleDLQWorld{bus: bus, queue: &refusingQueue{SQSQueue: q}, dlq: dlq}
	bus.SubscribeQueue(dlqTestTarget, w.queue, q.URL())
	if err := bus.SetDeadLetterQueue(dlqTestRule, dlq, dlq.URL()); err != nil {
		t.Fatal(err)
	}
	return w
}

// publish puts one order event per event id on the bus and waits until
// the bus delivered or dead-lettered each.
func (w *ruleDLQWorld) publish(t *testing.T, ids ...string) {
	t.Helper()
	var entries []ebtypes.PutEventsRequestEntry
	for i, id := range ids {
		entries = append(entries, ebtypes.PutEventsRequestEntry{EventBusName: aws.String("orders-bus"), Source: aws.String(dlqTestSource),
			DetailType: aws.String("OrderPaid"), Detail: aws.String(`{"event_id":"` + id + `","aggregate_type":"Order","aggregate_id":"o-` + id + `","sequence":` + strconv.Itoa(i+1) + `}`)})
	}
	out, err := w.bus.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: entries})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.bus.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

func (w *ruleDLQWorld) redrive(ctx context.Context, mut func(*RuleDLQRedrive)) (RuleDLQResult, error) {
	r := RuleDLQRedrive{DLQURL: w.dlq.URL(), QueueURL: w.queue.URL(), RuleARN: w.bus.RuleARN(dlqTestRule), Source: dlqTestSource}
	if mut != nil {
		mut(&r)
	}
	return RedriveRuleDLQ(ctx, w.dlq, w.queue, r)
}

// TestRuleDLQRedriveMovesTheRulesDeadLettersBack: a consumer queue refuses
// EventBridge (its KMS key disabled); the local bus does not retry that
// (eb-rule-dlq: missing permissions go to the DLQ at once) and puts each
// event on the rule's DLQ with AWS's attributes. A redrive while the queue
// still refuses moves nothing and deletes nothing; a dry run lists both
// events and moves nothing; once the key is back the redrive moves both
// (the DLQ's policy proves the rule sent them, and each message's
// attributes and body name the rule, the queue and the outbox's source),
// the consumer behind the queue (sqsconsumer under the local SQS event
// source mapping) applies each once, and a second redrive finds nothing.
func TestRuleDLQRedriveMovesTheRulesDeadLettersBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newRuleDLQWorld(t, true)
	w.queue.refuse.Store(true)
	w.publish(t, "e-1", "e-2")

	if st := w.bus.Stats(); st.Attempts[dlqTestTarget] != 2 || st.SentToDLQ[dlqTestTarget] != 2 || w.queue.Len() != 0 {
		t.Fatalf("bus stats %+v, queue %d: want one attempt per event and both on the rule DLQ", st, w.queue.Len())
	}
	peeked, err := sqsconsumer.Peek(ctx, w.dlq, w.dlq.URL(), sqsconsumer.RedriveOptions{})
	if err != nil || len(peeked) != 2 {
		t.Fatalf("rule DLQ: %v, %d messages", err, len(peeked))
	}
	for _, d := range peeked {
		r := d.Rule
		if r == nil || r.RuleARN != w.bus.RuleARN(dlqTestRule) || r.TargetARN != w.queue.ARN() || r.ErrorCode != sqsconsumer.RuleErrorNoPermissions ||
			!strings.Contains(r.ErrorMessage, "not enabled") || r.RetryAttempts != "0" || d.SenderID != localrt.EventBridgeSenderID {
			t.Errorf("rule DLQ message %+v, attributes %+v", d, r)
		}
	}
	// A principal cannot plant a message there: the DLQ's policy refuses it.
	if _, err := w.dlq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.dlq.URL()), MessageBody: aws.String(peeked[0].Body),
		MessageAttributes: forgedAttrs(w.bus.RuleARN(dlqTestRule), w.queue.ARN())}); err == nil {
		t.Fatal("the rule DLQ took a principal's message")
	}

	// The key is still disabled: nothing moves, nothing is deleted.
	res, err := w.redrive(ctx, nil)
	if err == nil || res.Moved != 0 || w.dlq.Len() != 2 || len(res.Left) == 0 || !strings.Contains(res.Left[0].Why, "not enabled") {
		t.Fatalf("redrive into a refusing queue: %v, %+v, DLQ %d; want an error, nothing moved, both kept", err, res, w.dlq.Len())
	}
	w.queue.refuse.Store(false)

	var listed []string
	res, err = w.redrive(ctx, func(r *RuleDLQRedrive) {
		r.DryRun = true
		r.OnMessage = func(d sqsconsumer.DeadLetter) { listed = append(listed, d.MessageID) }
	})
	if err != nil || !res.DryRun || res.Moved != 2 || len(listed) != 2 || len(res.Left) != 0 || w.dlq.Len() != 2 || w.queue.Len() != 0 {
		t.Fatalf("dry run: %v, %+v, listed %v, DLQ %d, queue %d", err, res, listed, w.dlq.Len(), w.queue.Len())
	}

	applied := map[string]int{}
	var mu sync.Mutex
	h, err := sqsconsumer.New(func(_ context.Context, ev events.EventBridgeEvent) error {
		var d struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(ev.Detail, &d); err != nil {
			return sqsconsumer.Permanent("malformed", err)
		}
		mu.Lock()
		applied[d.EventID]++
		mu.Unlock()
		return nil
	}, sqsconsumer.Config{Name: dlqTestTarget, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	poller, err := localrt.NewSQSPoller(localrt.SQSPollerConfig{Queue: w.queue.SQSQueue, FunctionName: dlqTestTarget, PollWait: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, h.Handle)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = poller.Run(pctx) }()
	defer func() { stop(); <-done }()

	res, err = w.redrive(ctx, nil)
	if err != nil || res.Moved != 2 || len(res.Left) != 0 || res.PolicyErr != nil || w.dlq.Len() != 0 {
		t.Fatalf("redrive: %v, %+v, DLQ %d; want both moved", err, res, w.dlq.Len())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(applied)
		mu.Unlock()
		if n == 2 && w.queue.Len() == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := w.redrive(ctx, nil); err != nil || res.Moved != 0 {
		t.Errorf("a second redrive: %v, %+v; want nothing to move", err, res)
	}
	time.Sleep(200 * time.Millisecond) // anything moved twice would be delivered by now
	mu.Lock()
	defer mu.Unlock()
	if applied["e-1"] != 1 || applied["e-2"] != 1 || len(applied) != 2 {
		t.Errorf("the consumer applied %v, want e-1 and e-2 once each", applied)
	}
}

// forgedAttrs are rule DLQ attributes a principal could set on a message
// it sends.
func forgedAttrs(ruleARN, targetARN string) map[string]sqstypes.MessageAttributeValue {
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return map[string]sqstypes.MessageAttributeValue{sqsconsumer.AttrRuleARN: str(ruleARN), sqsconsumer.AttrTargetARN: str(targetARN),
		sqsconsumer.AttrErrorCode: str(sqsconsumer.RuleErrorNoResource), sqsconsumer.AttrErrorMessage: str("gone")}
}

func mustQueue(t *testing.T, cfg localrt.SQSQueueConfig) *localrt.SQSQueue {
	t.Helper()
	q, err := localrt.NewSQSQueue(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestRuleDLQRedriveLeavesForgedMessages: a rule DLQ whose policy lets
// anyone send proves nothing, so RedriveRuleDLQ refuses to move from it
// (ErrRuleDLQNotRestricted) and touches nothing. Told to move on the
// attributes alone (AllowUnrestrictedDLQ), it still moves only the rule's
// dead letter and lists, with why, and leaves each hostile message: a
// forged RULE_ARN, a forged TARGET_ARN, another source, no attributes at
// all, one moved in by a redrive policy.
func TestRuleDLQRedriveLeavesForgedMessages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newRuleDLQWorld(t, false) // no policy: any local caller may send
	w.queue.refuse.Store(true)
	w.publish(t, "e-1")
	w.queue.refuse.Store(false)
	if w.dlq.Len() != 1 {
		t.Fatalf("rule DLQ holds %d messages, want the refused event", w.dlq.Len())
	}
	ruleARN, queueARN := w.bus.RuleARN(dlqTestRule), w.queue.ARN()
	genuine := string(w.bus.Events()[0])
	plant := func(body string, attrs map[string]sqstypes.MessageAttributeValue) {
		t.Helper()
		if _, err := w.dlq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.dlq.URL()), MessageBody: aws.String(body), MessageAttributes: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	otherRule := strings.Replace(ruleARN, dlqTestRule, "ledger-order-payments", 1)
	forgedBody := strings.Replace(genuine, `"e-1"`, `"e-forged"`, 1)
	plant(forgedBody, forgedAttrs(otherRule, queueARN))
	plant(forgedBody, forgedAttrs(ruleARN, "arn:aws:sqs:us-east-1:000000000000:orders-ledger"))
	plant(strings.Replace(forgedBody, dlqTestSource, "com.attacker", 1), forgedAttrs(ruleARN, queueARN))
	plant(forgedBody, nil)
	// one a (foreign) queue's redrive policy moved in
	src := mustQueue(t, localrt.SQSQueueConfig{Name: "foreign", Redrive: &localrt.RedrivePolicy{DeadLetterQueue: w.dlq, MaxReceiveCount: 1}})
	if _, err := src.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(src.URL()), MessageBody: aws.String(forgedBody), MessageAttributes: forgedAttrs(ruleARN, queueARN)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		out, _ := src.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(src.URL())})
		for _, m := range out.Messages {
			_, _ = src.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(src.URL()), ReceiptHandle: m.ReceiptHandle})
		}
	}
	if w.dlq.Len() != 6 {
		t.Fatalf("rule DLQ holds %d messages, want 6", w.dlq.Len())
	}

	res, err := w.redrive(ctx, nil)
	if !errors.Is(err, ErrRuleDLQNotRestricted) || res.Moved != 0 || w.dlq.Len() != 6 || w.queue.Len() != 0 {
		t.Fatalf("redrive from an unrestricted DLQ: %v, %+v; want ErrRuleDLQNotRestricted and nothing moved", err, res)
	}

	var left []string
	res, err = w.redrive(ctx, func(r *RuleDLQRedrive) {
		r.AllowUnrestrictedDLQ = true
		r.OnLeft = func(l sqsconsumer.LeftMessage) { left = append(left, l.Why) }
	})
	if err != nil || !errors.Is(res.PolicyErr, ErrRuleDLQNotRestricted) {
		t.Fatalf("redrive with AllowUnrestrictedDLQ: %v, policy %v", err, res.PolicyErr)
	}
	if res.Moved != 1 || w.queue.Len() != 1 || w.dlq.Len() != 5 {
		t.Fatalf("moved %d (queue %d, DLQ %d), want the genuine event only", res.Moved, w.queue.Len(), w.dlq.Len())
	}
	out, err := w.queue.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.queue.URL())})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != genuine {
		t.Fatalf("the queue holds %+v, want the genuine event", out)
	}
	all := strings.Join(left, "\n")
	for _, want := range []string{"RULE_ARN " + otherRule + " is not the rule", "TARGET_ARN arn:aws:sqs:us-east-1:000000000000:orders-ledger is not the queue",
		`event source "com.attacker"`, "not a dead letter of EventBridge", "by its redrive policy"} {
		if !strings.Contains(all, want) {
			t.Errorf("the reasons left do not say %q:\n%s", want, all)
		}
	}
	if len(res.Left) != 5 {
		t.Errorf("left %d messages, want 5", len(res.Left))
	}
}
