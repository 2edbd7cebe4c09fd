package devstack

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/internal/operator"
	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
	"github.com/ddb-outbox/ddb-outbox/pkg/sqsconsumer"
)

// RulePath is one routing rule as the CDK stack deploys it (infra/stack,
// outboxcdk.NewConsumer): the rule on the bus, its consumer's queue as target, and the
// target's DLQ, which holds the events EventBridge could not deliver to the
// queue (the queue refused them), with EventBridge's attributes.
type RulePath struct {
	// Rule is the rule's name, ARN its ARN on the stack's bus.
	Rule, ARN string
	// Consumer is the consumer whose queue the rule targets.
	Consumer string
	// DLQ is <prefix>-<rule>-rule-dlq: its policy admits the rule only
	// (localrt.SQSQueueConfig.OnlySourceArns, as deadletter.AcceptOnlyFrom
	// writes it), its retention the SQS maximum, as the stack's.
	DLQ *localrt.SQSQueue
}

// addRuleDLQ creates rule's DLQ, makes it the DLQ of the rule's target on
// the bus and, when the AWS front runs, serves it there.
func (s *Stack) addRuleDLQ(rule, consumer string) error {
	arn := s.Bus.RuleARN(rule)
	dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: operator.RuleDLQName(s.opts.Prefix, rule), RetentionPeriod: DLQRetention,
		MaximumMessageSize: sqsconsumer.MaxQueueMessageBytes, OnlySourceArns: []string{arn}, Store: s.store})
	if err != nil {
		return err
	}
	if err := s.Bus.SetDeadLetterQueue(rule, dlq, dlq.URL()); err != nil {
		return fmt.Errorf("devstack: rule %s: %w", rule, err)
	}
	if s.front != nil {
		if err := s.front.AddQueue(dlq); err != nil {
			return err
		}
	}
	if s.Rules == nil {
		s.Rules = map[string]*RulePath{}
	}
	s.Rules[rule] = &RulePath{Rule: rule, ARN: arn, Consumer: consumer, DLQ: dlq}
	return nil
}

// RuleNames returns the names of Rules, sorted.
func (s *Stack) RuleNames() []string {
	names := make([]string, 0, len(s.Rules))
	for n := range s.Rules {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RedriveRuleDLQ moves the events on rule's DLQ back to its consumer's
// queue with operator.RedriveRuleDLQ, the code of outboxctl
// rule-dlq-redrive (the DLQ's policy, RULE_ARN, TARGET_ARN and the
// outbox's source checked; anything else left). It returns an error for an
// unknown rule, or the redrive's.
func (s *Stack) RedriveRuleDLQ(ctx context.Context, rule string, dryRun bool) (operator.RuleDLQResult, error) {
	p, ok := s.Rules[rule]
	if !ok {
		return operator.RuleDLQResult{}, fmt.Errorf("devstack: no rule %q (the rules: %v)", rule, s.RuleNames())
	}
	c, ok := s.Consumers[p.Consumer]
	if !ok {
		return operator.RuleDLQResult{}, fmt.Errorf("devstack: rule %s targets no consumer of the stack (%q)", rule, p.Consumer)
	}
	return operator.RedriveRuleDLQ(ctx, p.DLQ, c.Queue, operator.RuleDLQRedrive{
		DLQURL: p.DLQ.URL(), QueueURL: c.Queue.URL(), RuleARN: p.ARN, Source: s.Settings.Source, DryRun: dryRun})
}

// refuseSwitch is Options.RefuseDeliveries: while active, the queues of its
// consumers refuse the bus's deliveries.
type refuseSwitch struct {
	consumers []string
	active    atomic.Bool
}

// refusingTarget is a consumer queue as the bus sends to it: with the
// switch active it refuses EventBridge as a queue whose policy no longer
// admits the rule does (AccessDenied, IAM's message for an explicit deny);
// other senders (an operator's redrive) are not refused.
type refusingTarget struct {
	next     localrt.MessageSender
	consumer string
	sw       *refuseSwitch
}

func (t refusingTarget) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if t.sw.active.Load() {
		return nil, &smithy.GenericAPIError{Code: localrt.ErrorCodeAccessDenied, Fault: smithy.FaultClient,
			Message: "User: events.amazonaws.com is not authorized to perform: sqs:sendmessage on the queue of " + t.consumer +
				" with an explicit deny in a resource-based policy (the local fault switch -refuse-delivery)"}
	}
	return t.next.SendMessage(ctx, in, o...)
}

// deliveryTarget is what the bus sends consumer's events through: its
// queue, wrapped by Options.RefuseDeliveries and WrapQueueTarget.
func (s *Stack) deliveryTarget(consumer string, q localrt.MessageSender) localrt.MessageSender {
	if s.refusing != nil && slices.Contains(s.refusing.consumers, consumer) {
		q = refusingTarget{next: q, consumer: consumer, sw: s.refusing}
	}
	if s.opts.WrapQueueTarget != nil {
		q = s.opts.WrapQueueTarget(consumer, q)
	}
	return q
}

// Refusing returns the consumers whose queues refuse the bus's deliveries
// now (Options.RefuseDeliveries until StopRefusing).
func (s *Stack) Refusing() []string {
	if s.refusing == nil || !s.refusing.active.Load() {
		return nil
	}
	return s.refusing.consumers
}

// StopRefusing lifts Options.RefuseDeliveries: from now on the consumers'
// queues take the bus's deliveries (redrive the rule DLQs to deliver what
// they refused). It reports whether a refusal was active.
func (s *Stack) StopRefusing() bool {
	return s.refusing != nil && s.refusing.active.Swap(false)
}
