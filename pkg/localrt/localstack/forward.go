package localstack

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/localrt"
)

// Forward forwards some of the stack's events to another event bus, as an
// EventBridge rule with an event bus target in another Region does
// (EventBridge user guide, eb-cross-region): in multi-Region mode a
// consumer lives in one home Region (docs/MULTI-REGION.md, choice 3), and
// every other Region's bus forwards that consumer's events to the home
// Region's bus, where the consumer's own rule delivers them.
//
// The stack makes the rule <Name>-forward on its bus, with the target To
// (named ToBus), the target's retry policy RetryPolicy, and a dead-letter
// queue <Name>-forward-dlq (a local SQS queue of the stack,
// Stack.ForwardDLQs) that receives, with EventBridge's DLQ attributes, every
// event whose retries ran out, whose age passed the policy's limit, or
// that the target refused for good (a bus that does not exist, an entry it
// will never accept).
//
// One hop: an event another bus forwarded to this stack's bus is delivered
// to this stack's consumers and forwarded no further (localrt.Bus.SubscribeBus:
// the local bus marks its deliveries to an event bus target, and a bus
// delivers a marked event to no event bus target, as EventBridge sends no
// event received from another bus on to a third one). So an event of
// Region A forwarded to B never comes back to A, even though B forwards
// the same consumer pattern to A (docs/PARITY.md).
type Forward struct {
	// Name names the forwarding rule (<Name>-forward) and its DLQ
	// (<Name>-forward-dlq), e.g. the consumer whose events it forwards.
	// Required: letters, digits, hyphens and underscores, at most 56
	// characters (EventBridge rule names: at most 64), unique among the
	// forwards and not giving a name a consumer's queue or rule has.
	Name string
	// AggregateType makes the rule {"source":[Source],"detail":
	// {"aggregate_type":[AggregateType]}}: every event of that aggregate
	// type. Pattern is any other EventBridge event pattern (JSON text or a
	// JSON-ready value), e.g. the home consumer's rule pattern. Exactly one
	// is required.
	AggregateType string
	Pattern       any
	// To receives the forwarded events through PutEvents: the other
	// stack's Bus (*localrt.Bus), or anything in front of it (a fault
	// switch). Required.
	To localrt.PutEventsAPI
	// ToBus is the receiving bus's ARN (the target's Arn on AWS; the other
	// stack's Bus.ARN()): the EventBusName of every forwarded entry.
	// Required.
	ToBus string
	// RetryPolicy is the target's retry policy (nil: EventBridge's default,
	// localrt.DefaultRetryPolicy: 185 retries over at most 24 hours). The
	// backoff between retries is the local bus's (50 ms doubling to 2 s).
	RetryPolicy *localrt.RetryPolicy
}

// Names the stack derives from a forward's name: the rule (and target)
// <Name>-forward and its DLQ <Name>-forward-dlq.
const (
	forwardSuffix  = "-forward"
	maxForwardName = maxRuleName - len(forwardSuffix)
)

func (f Forward) ruleName() string { return f.Name + forwardSuffix }
func (f Forward) dlqName() string  { return f.Name + forwardSuffix + "-dlq" }

// rulePattern is the forwarding rule's event pattern.
func (f Forward) rulePattern(source string) any {
	if f.AggregateType != "" {
		return Consumer{AggregateType: f.AggregateType}.rulePattern(source)
	}
	return f.Pattern
}

// validateForwards checks c.Forward: each forward's fields, and that no
// name a forward derives is one another forward or a consumer derives.
func (c *Config) validateForwards(bad func(string, ...any) error) error {
	taken := map[string]string{}
	for _, cs := range c.Consumers {
		for _, n := range []string{cs.Name, cs.Name + "-dlq", cs.Name + ruleSuffix, cs.Name + ruleSuffix + "-dlq"} {
			taken[n] = "consumer " + cs.Name
		}
	}
	for i, f := range c.Forward {
		switch {
		case f.Name == "":
			return bad("Forward[%d]: Name is required", i)
		case len(f.Name) > maxForwardName || !validConsumerName(f.Name, false):
			return bad("Forward[%d]: name %q: the stack names the forwarding rule and its DLQ after it (%s, %s), so it must be 1..%d "+
				"letters, digits, hyphens or underscores (EventBridge rule names: at most %d characters)", i, f.Name, f.ruleName(), f.dlqName(), maxForwardName, maxRuleName)
		case (f.AggregateType == "") == (f.Pattern == nil):
			return bad("forward %s: give exactly one of AggregateType and Pattern", f.Name)
		case f.To == nil:
			return bad("forward %s: To (the receiving bus, e.g. the other stack's Bus) is required", f.Name)
		case f.ToBus == "":
			return bad("forward %s: ToBus (the receiving bus's ARN, e.g. the other stack's Bus.ARN()) is required", f.Name)
		}
		if f.RetryPolicy != nil {
			if err := f.RetryPolicy.Validate(); err != nil {
				return bad("forward %s: RetryPolicy: %v", f.Name, err)
			}
		}
		for _, n := range []string{f.ruleName(), f.dlqName()} {
			if by, ok := taken[n]; ok {
				return bad("forward %s: its rule or DLQ would be named %q, a name %s already gives", f.Name, n, by)
			}
			taken[n] = "forward " + f.Name
		}
	}
	return nil
}

// forwardRules returns the bus rules of c.Forward.
func (c *Config) forwardRules() []localrt.Rule {
	rules := make([]localrt.Rule, 0, len(c.Forward))
	for _, f := range c.Forward {
		p := localrt.DefaultRetryPolicy()
		if f.RetryPolicy != nil {
			p = *f.RetryPolicy
		}
		rules = append(rules, localrt.Rule{Name: f.ruleName(), Target: f.ruleName(), Pattern: f.rulePattern(c.Source),
			RetryPolicy: &p})
	}
	return rules
}

// addForwards subscribes every forward's target and gives its rule its DLQ.
func (s *Stack) addForwards() error {
	s.ForwardDLQs = map[string]*localrt.SQSQueue{}
	for _, f := range s.cfg.Forward {
		s.Bus.SubscribeBus(f.ruleName(), f.To, f.ToBus)
		dlq, err := localrt.NewSQSQueue(localrt.SQSQueueConfig{Name: f.dlqName(), RetentionPeriod: DLQRetention,
			OnlySourceArns: []string{s.Bus.RuleARN(f.ruleName())}})
		if err != nil {
			return fmt.Errorf("localstack: forward %s: DLQ: %w", f.Name, err)
		}
		if err := s.Bus.SetDeadLetterQueue(f.ruleName(), dlq, dlq.URL()); err != nil {
			return fmt.Errorf("localstack: forward %s: %w", f.Name, err)
		}
		s.ForwardDLQs[f.Name] = dlq
	}
	return nil
}

// BusARN returns the ARN of the bus a stack of Config.Region region and
// Config.BusName busName has (its Bus.ARN()):
// arn:aws:events:<region>:000000000000:event-bus/<busName>, the local
// runtime's account, and its default Region (us-east-1) for "". It lets a
// Forward name a bus whose stack starts later (ForwardTarget).
func BusARN(region, busName string) string {
	if region == "" {
		region = localrt.DefaultRegion
	}
	return fmt.Sprintf("arn:aws:events:%s:%s:event-bus/%s", region, localrt.DefaultAccount, busName)
}

// ForwardTarget is a Forward.To bound after Start, for stacks that forward
// to each other (each needs the other's bus, which exists only once that
// stack started): give the ForwardTarget as To and BusARN as ToBus, start
// both stacks, then Bind each to the other's Bus. Until bound, PutEvents
// fails as EventBridge does for a bus that does not exist
// (ResourceNotFoundException), which the forwarding rule does not retry:
// the event goes to its DLQ. Safe for concurrent use.
type ForwardTarget struct {
	to atomic.Pointer[localrt.PutEventsAPI]
}

// Bind makes to the receiver of every later PutEvents (nil unbinds).
func (t *ForwardTarget) Bind(to localrt.PutEventsAPI) {
	if to == nil {
		t.to.Store(nil)
		return
	}
	t.to.Store(&to)
}

// PutEvents passes the request to the bound bus, or fails with
// ResourceNotFoundException when none is bound.
func (t *ForwardTarget) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	to := t.to.Load()
	if to == nil {
		name := ""
		if in != nil && len(in.Entries) > 0 {
			name = aws.ToString(in.Entries[0].EventBusName)
		}
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException", Fault: smithy.FaultClient,
			Message: fmt.Sprintf("Event bus %s does not exist.", name)}
	}
	return (*to).PutEvents(ctx, in, optFns...)
}
