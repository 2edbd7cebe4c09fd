package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// orderWitness checks promise I4 (an ordered consumer applies an
// aggregate's events in sequence) from outside the consumers, by commit
// order rather than by the timestamps the consumers write: those are taken
// before the transaction is sent, so an event that started first can commit
// second without anything being wrong.
//
// It is an SDK middleware at the end of the Finalize step, inside the fault
// middleware and the retry loop, so it sees every attempt that reached the
// server, including those whose answer the fault injector then discards.
// For every TransactWriteItems attempt that carries an ordering gate (an
// Update of a "<consumer>#SEQ#<type>#<id>" item, dedup.Gate) and succeeded
// (HTTP 200: DynamoDB committed it), it records the gate's sequence and the
// attempt's [sent, answered] interval. The commit happened inside that
// interval, so sequence M > N committed before N for certain when M's
// interval ended before N's began (inversions). Overlapping intervals
// prove nothing either way: the check has no false positives and catches
// any inversion separated by more than one call's duration (a late bus
// delivery is 100–600 ms, a redriven dead letter seconds).
type orderWitness struct {
	mu      sync.Mutex
	commits map[string][]gateCommit // by ordering item key
}

type gateCommit struct {
	seq        int64
	sent, done time.Time
}

func newOrderWitness() *orderWitness {
	return &orderWitness{commits: map[string][]gateCommit{}}
}

type witnessGateKey struct{}

// option installs the witness in an SDK client's stack.
func (w *orderWitness) option(st *middleware.Stack) error {
	if err := st.Initialize.Add(middleware.InitializeMiddlewareFunc("chaos.orderWitness.gate", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if p, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
			if key, seq, ok := gateOf(p); ok {
				ctx = middleware.WithStackValue(ctx, witnessGateKey{}, gateRef{key, seq})
			}
		}
		return next.HandleInitialize(ctx, in)
	}), middleware.After); err != nil {
		return err
	}
	return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("chaos.orderWitness.commit", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		g, ok := middleware.GetStackValue(ctx, witnessGateKey{}).(gateRef)
		if !ok {
			return next.HandleFinalize(ctx, in)
		}
		sent := time.Now()
		out, md, err := next.HandleFinalize(ctx, in)
		if err == nil {
			w.record(g.key, gateCommit{seq: g.seq, sent: sent, done: time.Now()})
		}
		return out, md, err
	}), middleware.After)
}

type gateRef struct {
	key string
	seq int64
}

func (w *orderWitness) record(key string, c gateCommit) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.commits[key] = append(w.commits[key], c)
}

// gateOf returns the ordering item key and the sequence an ordered Apply's
// transaction sets (the largest number among the gate's values: the
// condition holds sequence-1, the update the sequence).
func gateOf(p *dynamodb.TransactWriteItemsInput) (string, int64, bool) {
	for _, it := range p.TransactItems {
		u := it.Update
		if u == nil {
			continue
		}
		pk, _ := u.Key[dedup.AttrPK].(*types.AttributeValueMemberS)
		if pk == nil || !strings.Contains(pk.Value, dedup.SequenceInfix) {
			continue
		}
		seq, found := int64(0), false
		for _, v := range u.ExpressionAttributeValues {
			if n, ok := v.(*types.AttributeValueMemberN); ok {
				if x, err := strconv.ParseInt(n.Value, 10, 64); err == nil && x > seq {
					seq, found = x, true
				}
			}
		}
		if found {
			return pk.Value, seq, true
		}
	}
	return "", 0, false
}

// audit returns the committed gate transactions seen, the inversions (a
// higher sequence certainly committed before a lower one of the same
// ordering item) and up to 20 descriptions of them.
func (w *orderWitness) audit() (witnessed, inversions int, problems []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.commits))
	for k := range w.commits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cs := w.commits[k]
		witnessed += len(cs)
		for _, lo := range cs {
			for _, hi := range cs {
				if hi.seq > lo.seq && hi.done.Before(lo.sent) {
					inversions++
					if len(problems) < 20 {
						problems = append(problems, fmt.Sprintf("%s: sequence %d committed by %s, before sequence %d was sent at %s",
							k, hi.seq, hi.done.Format(time.RFC3339Nano), lo.seq, lo.sent.Format(time.RFC3339Nano)))
					}
				}
			}
		}
	}
	return witnessed, inversions, problems
}

// apply adds the witness to an SDK config's API options.
func (w *orderWitness) apply(c *aws.Config) {
	c.APIOptions = append(c.APIOptions, w.option)
}
