package stack

import (
	"testing"
)

// Issue 32 item 3 (d): dead letters cannot be erased silently.

// eraseDenials returns the Deny statements of queue qid's policies whose
// actions include sqs:PurgeQueue or sqs:DeleteMessage.
func eraseDenials(t *testing.T, s *synthesized, qid string) []any {
	t.Helper()
	var out []any
	for _, pid := range s.ofType("AWS::SQS::QueuePolicy") {
		p := s.props(t, pid)
		if !jsonEqual(t, p["Queues"], []any{ref(qid)}) {
			continue
		}
		for _, st := range policyStatements(p["PolicyDocument"]) {
			if get(st, "Effect") == "Deny" && (mentions(t, get(st, "Action"), "sqs:PurgeQueue") || mentions(t, get(st, "Action"), "sqs:DeleteMessage")) {
				out = append(out, st)
			}
		}
	}
	return out
}

// GIVEN the default stack (no operator roles) and the custom stack (a
// redrive role, the stack's DLQ operator)
// WHEN every dead-letter queue's policy is read (every queue but the
// consumer queues: consumer DLQs, rule DLQs, sweep DLQs, the parked-records
// queue, the stream and reconciler on-failure queues, the schedule's DLQ)
// THEN each holds one Deny of sqs:DeleteMessage and sqs:PurgeQueue (the
// first also authorizes DeleteMessageBatch) to every principal whose
// aws:PrincipalArn is not an operator role: with none, to every IAM
// principal. No function deletes from a DLQ (the consumers, the relay and
// the reconciler only send to theirs), so no function role is excepted. A
// consumer queue has no such Deny: its event source mapping deletes what
// the consumer applied.
func TestDLQsKeepTheirMessagesFromAllButTheOperators(t *testing.T) {
	for _, c := range []struct {
		s         *synthesized
		operators []any
	}{{def, nil}, {custom, []any{redriveRole}}} {
		s := c.s
		name := *s.stack.StackName()
		consumerQueues := map[string]bool{}
		for _, cq := range s.stack.Consumers {
			consumerQueues[s.id(cq.Queue)] = true
		}
		dlqs := 0
		for _, qid := range s.ofType("AWS::SQS::Queue") {
			sts := eraseDenials(t, s, qid)
			if consumerQueues[qid] {
				if len(sts) != 0 {
					t.Errorf("%s: consumer queue %s denies deletes: %v", name, qid, normalize(t, sts))
				}
				continue
			}
			dlqs++
			if len(sts) != 1 {
				t.Errorf("%s: dead-letter queue %s has %d Deny statements on DeleteMessage/PurgeQueue, want 1", name, qid, len(sts))
				continue
			}
			st := sts[0]
			cond := map[string]any{"Null": map[string]any{"aws:PrincipalArn": "false"}}
			if c.operators != nil {
				cond["ArnNotEquals"] = map[string]any{"aws:PrincipalArn": c.operators}
			}
			want := map[string]any{
				"Principal": map[string]any{"AWS": "*"},
				"Action":    []any{"sqs:DeleteMessage", "sqs:PurgeQueue"},
				"Resource":  getAtt(qid, "Arn"),
				"Condition": cond,
			}
			for k, v := range want {
				if !jsonEqual(t, get(st, k), v) {
					t.Errorf("%s: DLQ %s deny %s = %v, want %v", name, qid, k, normalize(t, get(st, k)), normalize(t, v))
				}
			}
		}
		if dlqs < 10 {
			t.Errorf("%s: %d dead-letter queues checked, want every one (at least 10)", name, dlqs)
		}
	}
}
