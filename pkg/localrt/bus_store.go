package localrt

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// storedDelivery is an accepted event not yet taken by one rule target, as
// the bus's Store keeps it.
type storedDelivery struct {
	Rule        string          `json:"rule"`
	Consumer    string          `json:"consumer"`
	Event       json.RawMessage `json:"event"`
	TraceHeader string          `json:"trace_header,omitempty"`
	AcceptedAt  int64           `json:"accepted_at"`
}

// storedDeadLetter is a DeadLetter as the Store keeps it (Event is decoded
// again from EventJSON).
type storedDeadLetter struct {
	Consumer  string          `json:"consumer"`
	Rule      string          `json:"rule"`
	EventJSON json.RawMessage `json:"event"`
	Attempts  int             `json:"attempts"`
	Error     string          `json:"error"`
	At        int64           `json:"at"`
	RuleARN   string          `json:"rule_arn,omitempty"`
	TargetARN string          `json:"target_arn,omitempty"`
	ErrorCode string          `json:"error_code,omitempty"`
	DLQMsgID  string          `json:"dlq_message_id,omitempty"`
}

func (b *Bus) pendingPrefix() string { return "bus/" + b.ARN() + "/pending/" }
func (b *Bus) deadPrefix() string    { return "bus/" + b.ARN() + "/dead/" }

// keepDeliveries writes ds to the Store; on an error it forgets those it
// wrote and returns the error.
func (b *Bus) keepDeliveries(ds []delivery) error {
	if b.cfg.Store == nil {
		return nil
	}
	now := b.cfg.Now().UnixNano()
	var kept []string
	for _, d := range ds {
		v, err := json.Marshal(storedDelivery{Rule: d.rule.Name, Consumer: d.rule.Target, Event: d.raw, TraceHeader: d.traceHeader, AcceptedAt: now})
		if err == nil {
			err = b.cfg.Store.Put(b.pendingPrefix()+d.id, v)
		}
		if err != nil {
			_ = b.cfg.Store.Delete(kept...)
			return fmt.Errorf("the local bus could not keep the event for rule %s: %w", d.rule.Name, err)
		}
		kept = append(kept, b.pendingPrefix()+d.id)
	}
	return nil
}

// forgetDelivery drops a delivery its target took. A failure only logs: the
// delivery is made again after a restart (a duplicate, never a loss).
func (b *Bus) forgetDelivery(id string) {
	if b.cfg.Store == nil {
		return
	}
	if err := b.cfg.Store.Delete(b.pendingPrefix() + id); err != nil {
		b.log.Warn("could not forget a delivered event: it is delivered again after a restart", "delivery", id, "error", err)
	}
}

// keepDeadLetter writes dl, then forgets the delivery it ends.
func (b *Bus) keepDeadLetter(id string, dl DeadLetter) {
	if b.cfg.Store == nil {
		return
	}
	v, err := json.Marshal(storedDeadLetter{Consumer: dl.Consumer, Rule: dl.Rule, EventJSON: dl.EventJSON, Attempts: dl.Attempts, Error: dl.Error, At: dl.At.UnixNano(),
		RuleARN: dl.RuleARN, TargetARN: dl.TargetARN, ErrorCode: dl.ErrorCode, DLQMsgID: dl.DLQMessageID})
	if err == nil {
		err = b.cfg.Store.Put(b.deadPrefix()+id, v)
	}
	if err != nil {
		b.log.Error("could not keep a dead letter: its delivery stays kept and is retried after a restart", "delivery", id, "error", err)
		return
	}
	b.forgetDelivery(id)
}

// restoreDeadLetters loads the kept dead letters, oldest first.
func (b *Bus) restoreDeadLetters() error {
	for k, v := range b.cfg.Store.Records(b.deadPrefix()) {
		var s storedDeadLetter
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("localrt: bus %s: stored dead letter %s: %w", b.cfg.Name, k, err)
		}
		dl := DeadLetter{Consumer: s.Consumer, Rule: s.Rule, EventJSON: s.EventJSON, Attempts: s.Attempts, Error: s.Error, At: time.Unix(0, s.At),
			RuleARN: s.RuleARN, TargetARN: s.TargetARN, ErrorCode: s.ErrorCode, DLQMessageID: s.DLQMsgID}
		_ = json.Unmarshal(s.EventJSON, &dl.Event)
		b.dead = append(b.dead, dl)
	}
	sort.SliceStable(b.dead, func(i, j int) bool { return b.dead[i].At.Before(b.dead[j].At) })
	return nil
}

// Resume starts the deliveries the Store kept from an earlier run — events
// the bus had accepted and not yet handed to a target when the stack
// stopped — each to the target now subscribed for its consumer, oldest
// first, with a fresh retry budget (a rule's MaximumEventAge still counts
// from the event's first acceptance). Call it once, after Subscribe and
// SubscribeQueue. A kept delivery whose rule or consumer has no target now
// stays kept (logged). It returns the number started; without a Store, 0.
// It returns an error when a kept delivery does not decode.
func (b *Bus) Resume() (int, error) {
	if b.cfg.Store == nil {
		return 0, nil
	}
	type kept struct {
		id string
		s  storedDelivery
	}
	var ks []kept
	prefix := b.pendingPrefix()
	for k, v := range b.cfg.Store.Records(prefix) {
		var s storedDelivery
		if err := json.Unmarshal(v, &s); err != nil {
			return 0, fmt.Errorf("localrt: bus %s: stored delivery %s: %w", b.cfg.Name, k, err)
		}
		ks = append(ks, kept{k[len(prefix):], s})
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].s.AcceptedAt < ks[j].s.AcceptedAt })
	b.mu.Lock()
	defer b.mu.Unlock()
	started := 0
	for _, k := range ks {
		var rule *busRule
		for i := range b.rules {
			if b.rules[i].rule.Name == k.s.Rule {
				rule = &b.rules[i]
			}
		}
		t, ok := b.handlers[k.s.Consumer]
		if rule == nil || !ok {
			b.log.Warn("a kept delivery has no target now: it stays kept", "rule", k.s.Rule, "consumer", k.s.Consumer, "delivery", k.id)
			continue
		}
		b.inflight++
		started++
		go b.deliver(delivery{id: k.id, rule: rule.rule, target: t, raw: k.s.Event, traceHeader: k.s.TraceHeader, accepted: time.Unix(0, k.s.AcceptedAt)})
	}
	if started > 0 {
		b.log.Info("resumed the deliveries kept from the last run", "deliveries", started)
	}
	return started, nil
}
