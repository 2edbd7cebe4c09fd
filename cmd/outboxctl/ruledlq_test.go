package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// policyRefusal is the ledger queue refusing EventBridge (its policy no
// longer admits the rule) while on is set.
type policyRefusal struct {
	*localrt.SQSQueue
	on atomic.Bool
}

func (q *policyRefusal) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if q.on.Load() {
		return nil, &smithy.GenericAPIError{Code: localrt.ErrorCodeAccessDenied, Message: "User: events.amazonaws.com is not authorized to perform: sqs:sendmessage", Fault: smithy.FaultClient}
	}
	return q.SQSQueue.SendMessage(ctx, in, o...)
}

// TestRuleDLQRedrive drives outboxctl rule-dlq-redrive end to end through
// the local AWS front: the ledger's queue refuses EventBridge, so the bus
// puts the OrderPaid on the ledger rule's DLQ (AWS's attributes; nobody
// else can send there: the front's SendMessage gets AccessDenied); a dry
// run lists it and moves nothing; a run naming the wrong queue lists it
// with why and leaves it; a run against a DLQ whose policy proves nothing
// (the consumer DLQ) moves nothing; once the queue accepts again the run
// moves it to the ledger's queue, by the rule's name and bus.
func TestRuleDLQRedrive(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if !slicesHasRule(ledgerRule) {
		t.Fatalf("%s is not a routing rule", ledgerRule)
	}
	target := &policyRefusal{SQSQueue: w.queue}
	target.on.Store(true)
	w.bus.SubscribeQueue(routing.ConsumerLedger, target, w.queue.URL())
	out, err := w.bus.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		EventBusName: aws.String("ctl-bus"), Source: aws.String(appenv.EventSource), DetailType: aws.String("OrderPaid"),
		Detail: aws.String(`{"event_id":"ev-9","event_type":"OrderPaid","aggregate_type":"Order","aggregate_id":"o-9","sequence":2}`),
	}}})
	if err != nil || out.FailedEntryCount != 0 {
		t.Fatalf("PutEvents: %v %+v", err, out)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.bus.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if w.ruleDLQ.Len() != 1 || w.queue.Len() != 0 {
		t.Fatalf("rule DLQ %d, ledger queue %d: want the OrderPaid on the rule DLQ", w.ruleDLQ.Len(), w.queue.Len())
	}
	// Nobody plants a message there through the front.
	client := sqs.NewFromConfig(dynoxide.AWSConfig(w.endpoint))
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(w.ruleDLQ.URL()), MessageBody: aws.String(string(w.bus.Events()[0]))})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != localrt.ErrorCodeAccessDenied || w.ruleDLQ.Len() != 1 {
		t.Fatalf("a principal's SendMessage to the rule DLQ: %v (DLQ %d), want AccessDenied", err, w.ruleDLQ.Len())
	}

	ruleARN := w.bus.RuleARN(ledgerRule)
	args := []string{"rule-dlq-redrive", "-dlq", "ctl-ledger-order-payments-rule-dlq", "-queue", "ctl-ledger", "-rule", ledgerRule, "-bus", "ctl-bus"}
	got, err := w.ctl(t, append(args, "-dry-run")...)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, got)
	}
	mustContain(t, "dry run", got,
		"rule DLQ "+w.ruleDLQ.URL()+" of rule "+ruleARN+" → queue "+w.queue.URL(),
		"the DLQ's policy admits only the rule as sender",
		"would redrive\t", "\tOrderPaid Order/o-9 #2 ev-9\t"+sqsconsumer.RuleErrorNoPermissions+"\trule "+ruleARN+" (sender "+localrt.EventBridgeSenderID+")\t",
		"dry run: 1 message(s) would be redriven from "+w.ruleDLQ.URL()+" to "+w.queue.URL()+"; 0 would be left on the DLQ; nothing moved")
	if w.ruleDLQ.Len() != 1 || w.queue.Len() != 0 {
		t.Fatalf("the dry run moved something: DLQ %d, queue %d", w.ruleDLQ.Len(), w.queue.Len())
	}

	// The wrong queue: the message names the ledger's.
	got, err = w.ctl(t, "rule-dlq-redrive", "-dlq", "ctl-ledger-order-payments-rule-dlq", "-queue", "ctl-ledger-dlq", "-rule", ruleARN)
	if err != nil {
		t.Fatalf("wrong queue: %v\n%s", err, got)
	}
	mustContain(t, "wrong queue", got, "left\t", "TARGET_ARN "+w.queue.ARN()+" is not the queue "+w.dlq.ARN(),
		"0 message(s) redriven from "+w.ruleDLQ.URL()+" to "+w.dlq.URL()+"; 1 left on the DLQ")

	// A DLQ whose policy lets anyone send proves nothing.
	got, err = w.ctl(t, "rule-dlq-redrive", "-dlq", "ctl-ledger-dlq", "-queue", "ctl-ledger", "-rule", ruleARN)
	if !errors.Is(err, sqsconsumer.ErrRuleDLQNotRestricted) || !strings.Contains(got, "nothing moved: the DLQ's policy does not refuse senders other than the rule") ||
		w.dlq.Len() != 2 || w.queue.Len() != 0 {
		t.Fatalf("redrive from an unrestricted DLQ: %v\n%s", err, got)
	}

	target.on.Store(false)
	got, err = w.ctl(t, args...)
	if err != nil {
		t.Fatalf("redrive: %v\n%s", err, got)
	}
	mustContain(t, "redrive", got, "redriven\t", "\tOrderPaid Order/o-9 #2 ev-9\t",
		"1 message(s) redriven from "+w.ruleDLQ.URL()+" to "+w.queue.URL()+"; 0 left on the DLQ")
	if w.ruleDLQ.Len() != 0 || w.queue.Len() != 1 {
		t.Fatalf("after the redrive: rule DLQ %d, ledger queue %d; want the event on the queue", w.ruleDLQ.Len(), w.queue.Len())
	}
	msgs, err := w.queue.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.queue.URL()), MessageAttributeNames: []string{"All"}})
	if err != nil || len(msgs.Messages) != 1 || aws.ToString(msgs.Messages[0].Body) != string(w.bus.Events()[0]) || len(msgs.Messages[0].MessageAttributes) != 0 {
		t.Fatalf("ledger queue: %v %+v, want the event as the rule delivers it", err, msgs)
	}
}

func slicesHasRule(name string) bool {
	for _, r := range routing.Rules() {
		if r.Name == name && r.Consumer == routing.ConsumerLedger {
			return true
		}
	}
	return false
}
