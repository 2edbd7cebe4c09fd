package sqsconsumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws/arn"

	"github.com/ddb-outbox/ddb-outbox/pkg/internal/jsonstrict"
)

// An EventBridge rule's target DLQ (DeadLetterConfig) holds the events
// EventBridge could not deliver to the target: the consumer queue refused
// them (deleted, its KMS key disabled, its policy), or the retry policy ran
// out. EventBridge sends the event JSON as the message body, with these
// message attributes (EventBridge user guide, "Using dead-letter queues to
// process undelivered events", eb-rule-dlq:
// https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html).
// The page names the attributes but not their data types: readers here
// take each attribute's StringValue whatever its DataType.
const (
	// AttrRuleARN is the ARN of the rule whose target failed.
	AttrRuleARN = "RULE_ARN"
	// AttrTargetARN is the ARN of the target it could not deliver to.
	AttrTargetARN = "TARGET_ARN"
	// AttrErrorCode is why (RuleError* below: a sample AWS lists).
	AttrErrorCode = "ERROR_CODE"
	// AttrErrorMessage is the error's text.
	AttrErrorMessage = "ERROR_MESSAGE"
	// AttrExhaustedRetryCondition is the retry policy limit that ended the
	// delivery: ExhaustedMaximumRetryAttempts or ExhaustedMaximumEventAge.
	AttrExhaustedRetryCondition = "EXHAUSTED_RETRY_CONDITION"
	// AttrRetryAttempts is the number of retries made.
	AttrRetryAttempts = "RETRY_ATTEMPTS"
)

// Error codes a rule DLQ message carries in AttrErrorCode: those of the
// sample in eb-rule-dlq that a queue target can meet.
const (
	// RuleErrorNoResource: the target does not exist (a deleted queue).
	// Not retried: EventBridge sends it to the DLQ at once (eb-rule-dlq).
	RuleErrorNoResource = "NO_RESOURCE"
	// RuleErrorNoPermissions: the target refused EventBridge (its policy,
	// a KMS key EventBridge may not use). Not retried (eb-rule-dlq).
	RuleErrorNoPermissions = "NO_PERMISSIONS"
	// RuleErrorThrottling: the target throttled the delivery.
	RuleErrorThrottling = "THROTTLING"
	// RuleErrorTimeout: the delivery timed out.
	RuleErrorTimeout = "TIMEOUT"
	// RuleErrorInvalidParameter: the target refused the request's values.
	RuleErrorInvalidParameter = "INVALID_PARAMETER"
	// RuleErrorFromTarget: the target answered with an error.
	RuleErrorFromTarget = "ERROR_FROM_TARGET"
	// RuleErrorInternal: EventBridge failed internally.
	RuleErrorInternal = "INTERNAL_ERROR"
)

// Values of AttrExhaustedRetryCondition (eb-rule-dlq).
const (
	ExhaustedMaximumRetryAttempts = "MaximumRetryAttempts"
	ExhaustedMaximumEventAge      = "MaximumEventAgeInSeconds"
)

// RuleDelivery is what EventBridge says of a delivery it gave up: the
// message attributes of a rule DLQ message (eb-rule-dlq). Each field is the
// attribute's StringValue ("" when absent). Anyone allowed to send to the
// queue can set message attributes: they prove nothing by themselves
// (RuleProvenance, CheckRuleDLQPolicy).
type RuleDelivery struct {
	RuleARN                 string
	TargetARN               string
	ErrorCode               string
	ErrorMessage            string
	ExhaustedRetryCondition string
	RetryAttempts           string
}

// ruleDelivery reads a rule DLQ message's attributes (nil when it carries
// none of RULE_ARN, TARGET_ARN and ERROR_CODE: not EventBridge's shape).
func ruleDelivery(attr func(string) (string, bool)) *RuleDelivery {
	_, r := attr(AttrRuleARN)
	_, t := attr(AttrTargetARN)
	_, c := attr(AttrErrorCode)
	if !r && !t && !c {
		return nil
	}
	v := func(name string) string { s, _ := attr(name); return s }
	return &RuleDelivery{RuleARN: v(AttrRuleARN), TargetARN: v(AttrTargetARN), ErrorCode: v(AttrErrorCode),
		ErrorMessage: v(AttrErrorMessage), ExhaustedRetryCondition: v(AttrExhaustedRetryCondition), RetryAttempts: v(AttrRetryAttempts)}
}

// Prover decides which DLQ messages Redrive may move: Provenance for a
// consumer DLQ, RuleProvenance for a rule DLQ.
type Prover interface {
	// Validate returns an error when the prover cannot prove anything
	// (a required field missing or malformed).
	Validate() error
	// Proves reports whether d may be moved, and when not, why.
	Proves(d DeadLetter) (bool, string)
}

// RuleProvenance says which messages on an EventBridge rule's target DLQ
// are the events that rule could not deliver to the consumer queue, so a
// Redrive may send them to that queue: a message is proven when
//
//   - no queue's redrive policy moved it there (DeadLetterQueueSourceArn is
//     empty: EventBridge sends, it does not redrive);
//   - its RULE_ARN attribute is RuleARN and its TARGET_ARN is TargetARN;
//   - its body is an EventBridge event (strict JSON, the shape a consumer
//     decodes) whose source is Source, with an id, a detail-type and an
//     object detail.
//
// The attributes are trustworthy only because nobody but EventBridge, for
// this rule, can send to the queue: check the queue's policy first
// (CheckRuleDLQPolicy). SenderId is not checked: the principal id SQS
// records for EventBridge's sends is not documented.
type RuleProvenance struct {
	// RuleARN is the rule's ARN: arn:aws:events:<region>:<account>:rule/<name>
	// on the default bus, .../rule/<bus>/<name> on another.
	RuleARN string
	// TargetARN is the consumer queue's ARN, the rule's target.
	TargetARN string
	// Source is the events' source (the outbox's EVENT_SOURCE).
	Source string
}

// Validate returns an error when a field is empty, RuleARN is not an
// EventBridge rule ARN, or TargetARN not an SQS queue ARN.
func (p RuleProvenance) Validate() error {
	if a, err := arn.Parse(p.RuleARN); err != nil || a.Service != "events" || !strings.HasPrefix(a.Resource, "rule/") {
		return fmt.Errorf("sqsconsumer: RuleProvenance.RuleARN %q is not an EventBridge rule ARN", p.RuleARN)
	}
	if a, err := arn.Parse(p.TargetARN); err != nil || a.Service != "sqs" || a.Resource == "" {
		return fmt.Errorf("sqsconsumer: RuleProvenance.TargetARN %q is not an SQS queue ARN", p.TargetARN)
	}
	if strings.TrimSpace(p.Source) == "" {
		return errors.New("sqsconsumer: RuleProvenance.Source is empty")
	}
	return nil
}

// Proves reports whether d is an event the rule could not deliver to the
// target, and when not, why.
func (p RuleProvenance) Proves(d DeadLetter) (bool, string) {
	switch r := d.Rule; {
	case d.SourceQueueARN != "":
		return false, "moved to the DLQ from queue " + d.SourceQueueARN + " by its redrive policy, not sent by EventBridge"
	case r == nil:
		return false, "carries no " + AttrRuleARN + ", " + AttrTargetARN + " or " + AttrErrorCode + " attribute: not a dead letter of EventBridge"
	case r.RuleARN != p.RuleARN:
		return false, AttrRuleARN + " " + orNone(r.RuleARN) + " is not the rule " + p.RuleARN
	case r.TargetARN != p.TargetARN:
		return false, AttrTargetARN + " " + orNone(r.TargetARN) + " is not the queue " + p.TargetARN
	}
	if err := checkRuleEvent(d.Body, p.Source); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// checkRuleEvent returns an error unless body is an EventBridge event of
// source, decoded as a consumer decodes it (jsonstrict, then
// events.EventBridgeEvent).
func checkRuleEvent(body, source string) error {
	var ev events.EventBridgeEvent
	err := jsonstrict.Check([]byte(body))
	if err == nil {
		err = jsonstrict.CheckFields([]byte(body), &ev)
	}
	if err == nil {
		err = json.Unmarshal([]byte(body), &ev)
	}
	if err != nil {
		return fmt.Errorf("body is not an EventBridge event: %w", err)
	}
	var detail map[string]json.RawMessage
	switch {
	case ev.Source != source:
		return fmt.Errorf("event source %q is not %q", ev.Source, source)
	case ev.ID == "" || ev.DetailType == "":
		return errors.New("event has no id or detail-type")
	case json.Unmarshal(ev.Detail, &detail) != nil || detail == nil:
		return errors.New("event detail is not a JSON object")
	}
	return nil
}

// ErrRuleDLQNotRestricted: a rule DLQ's queue policy does not refuse
// SendMessage to everyone but EventBridge acting for the rule, so its
// messages' attributes (RULE_ARN, TARGET_ARN) could have been set by any
// principal allowed to send: they prove nothing.
var ErrRuleDLQNotRestricted = errors.New("sqsconsumer: the rule DLQ's policy does not refuse senders other than the rule")

// CheckRuleDLQPolicy returns nil when policy (the queue's Policy attribute,
// GetQueueAttributes) holds a statement that denies sqs:SendMessage on the
// queue dlqARN to every principal whose request's aws:SourceArn is not
// ruleARN — the statement deadletter.AcceptOnlyFrom(SourceArns: the rule)
// writes:
//
//	{"Effect":"Deny","Principal":{"AWS":"*"},"Action":"sqs:SendMessage","Resource":"<dlqARN>",
//	 "Condition":{"ArnNotEquals":{"aws:SourceArn":"<ruleARN>"}}}
//
// Why that proves the sender: an explicit Deny overrides every Allow, a
// queue policy's Deny binds the account's own principals too (IAM policy
// evaluation logic); aws:SourceArn is in a request's context only when an
// AWS service calls on behalf of a resource (IAM, global condition keys),
// never in a principal's own call; and a negated operator whose key is
// absent is true, so the Deny refuses every request without it (IAM,
// condition operators). So only a service acting for the rule — EventBridge
// delivering the rule's dead letters — can send.
//
// Accepted: Effect Deny; Principal "*" or {"AWS":"*"}; an Action matching
// sqs:SendMessage (wildcards as IAM reads them, case-insensitive); a
// Resource matching dlqARN; a Condition of exactly one operator among
// ArnNotEquals, ArnNotLike, StringNotEquals, StringNotLike with exactly the
// key aws:SourceArn, every value equal to ruleARN (a wildcard could admit
// other sources). Anything that narrows the Deny (NotPrincipal, NotAction,
// NotResource, a second condition, an ...IfExists operator) is not
// accepted. Otherwise the error wraps ErrRuleDLQNotRestricted and says what
// is missing; a policy that is not JSON is an error too.
//
// The check reads the policy as it is now: a principal allowed
// sqs:SetQueueAttributes could have loosened it while planting a message
// and restored it since (CloudTrail records SetQueueAttributes).
func CheckRuleDLQPolicy(policy, dlqARN, ruleARN string) error {
	if strings.TrimSpace(policy) == "" {
		return fmt.Errorf("%w: the queue has no policy (deadletter.AcceptOnlyFrom with the rule as SourceArns writes one)", ErrRuleDLQNotRestricted)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(policy), &doc); err != nil {
		return fmt.Errorf("sqsconsumer: the rule DLQ's policy is not JSON: %w", err)
	}
	var stmts []map[string]json.RawMessage
	if raw := doc["Statement"]; len(raw) > 0 && raw[0] == '{' {
		var one map[string]json.RawMessage
		if err := json.Unmarshal(raw, &one); err != nil {
			return fmt.Errorf("sqsconsumer: the rule DLQ's policy Statement: %w", err)
		}
		stmts = append(stmts, one)
	} else if len(raw) > 0 {
		if err := json.Unmarshal(raw, &stmts); err != nil {
			return fmt.Errorf("sqsconsumer: the rule DLQ's policy Statement: %w", err)
		}
	}
	for _, s := range stmts {
		if deniesAllButSource(s, dlqARN, ruleARN) {
			return nil
		}
	}
	return fmt.Errorf("%w: no statement denies sqs:SendMessage on %s to every request whose aws:SourceArn is not %s", ErrRuleDLQNotRestricted, dlqARN, ruleARN)
}

// deniesAllButSource reports whether statement s is the Deny
// CheckRuleDLQPolicy looks for.
func deniesAllButSource(s map[string]json.RawMessage, dlqARN, ruleARN string) bool {
	for _, narrowing := range []string{"NotPrincipal", "NotAction", "NotResource"} {
		if _, ok := s[narrowing]; ok {
			return false
		}
	}
	var effect string
	if json.Unmarshal(s["Effect"], &effect) != nil || effect != "Deny" || !everyPrincipal(s["Principal"]) {
		return false
	}
	if !anyMatches(s["Action"], "sqs:SendMessage", true) || !anyMatches(s["Resource"], dlqARN, false) {
		return false
	}
	var cond map[string]map[string]json.RawMessage
	if json.Unmarshal(s["Condition"], &cond) != nil || len(cond) != 1 {
		return false
	}
	for op, keys := range cond {
		switch op {
		case "ArnNotEquals", "ArnNotLike", "StringNotEquals", "StringNotLike":
		default:
			return false
		}
		if len(keys) != 1 {
			return false
		}
		for k, raw := range keys {
			vals, ok := stringList(raw)
			if !strings.EqualFold(k, "aws:SourceArn") || !ok || len(vals) == 0 {
				return false
			}
			for _, v := range vals {
				if v != ruleARN {
					return false
				}
			}
		}
	}
	return true
}

// everyPrincipal reports whether a Principal element is "*" or
// {"AWS":"*"} (or {"AWS":["*"]}).
func everyPrincipal(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s == "*"
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return false
	}
	vals, ok := stringList(m["AWS"])
	return ok && len(vals) == 1 && vals[0] == "*"
}

// anyMatches reports whether one of the element's values (a string or a
// list of strings) matches s as an IAM pattern (* and ?), case-insensitively
// when fold (action names).
func anyMatches(raw json.RawMessage, s string, fold bool) bool {
	vals, ok := stringList(raw)
	if !ok {
		return false
	}
	for _, v := range vals {
		if fold {
			v, s = strings.ToLower(v), strings.ToLower(s)
		}
		if globMatch(v, s) {
			return true
		}
	}
	return false
}

// stringList decodes a policy value that is a string or a list of strings.
func stringList(raw json.RawMessage) ([]string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, true
	}
	var l []string
	if json.Unmarshal(raw, &l) == nil {
		return l, true
	}
	return nil, false
}

// globMatch matches s against pattern p with IAM's wildcards: * any run of
// characters, ? one character.
func globMatch(p, s string) bool {
	pr, sr := []rune(p), []rune(s)
	var star, mark = -1, 0
	i, j := 0, 0
	for j < len(sr) {
		switch {
		case i < len(pr) && (pr[i] == '?' || pr[i] == sr[j]):
			i++
			j++
		case i < len(pr) && pr[i] == '*':
			star, mark = i, j
			i++
		case star >= 0:
			i = star + 1
			mark++
			j = mark
		default:
			return false
		}
	}
	for i < len(pr) && pr[i] == '*' {
		i++
	}
	return i == len(pr)
}
