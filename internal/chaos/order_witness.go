package chaos

import (
	"context"
	"errors"
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

	"github.com/ddb-outbox/ddb-outbox/internal/orders/ledger"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// orderWitness checks promise I4 (an ordered consumer applies an
// aggregate's events in sequence) from outside the consumers, by commit
// order rather than by the timestamps the consumers write: those are taken
// before the transaction is sent, so an event that started first can commit
// second without anything being wrong.
//
// It is an SDK middleware at the end of the Finalize step, inside the fault
// middleware and the retry loop, so it sees every attempt that reached the
// wire, including those whose answer the fault injector then discards. For
// every TransactWriteItems attempt that carries an ordering gate (an Update
// of a "<consumer>#SEQ#<type>#<id>" item, dedup.Gate) it records the gate's
// sequence, when the attempt was sent and answered, and its outcome:
// committed (HTTP 200), refused (DynamoDB answered with a 4xx error: a
// cancelled transaction writes nothing) or unknown (anything else: a lost
// answer, a 5xx, a cancelled context may still have committed).
//
// Per sequence, the commit happened no earlier than the first attempt that
// was not refused was sent, and no later than the first committed attempt
// was answered (a later 200 can be DynamoDB's idempotent answer to a
// repeated ClientRequestToken, long after the commit). Sequence M > N
// committed before N for certain when M's latest possible commit precedes
// N's earliest possible one (inversions). Anything less certain counts
// nothing: no false positives, and any inversion separated by more than one
// call's duration is caught (a late bus delivery is 100–600 ms, a redriven
// dead letter seconds).
//
// Ordering items are told apart by table and key ("<table>/<key>"): a
// ledger restored from a backup keeps the lost one's consumer name in a
// table of its own.
//
// It keeps the same commit window for every ledger-shaped entry a
// transaction puts ("ENTRY#<event_id>" items, in any table): the effect
// log the history audit reads refunds and payments from
// (refundsBeforePayments).
//
// It also follows the resequencer (dedup.Resequencer): every committed
// transaction that puts a buffer item (an early event stored) or deletes
// one together with a gate (a buffered event applied after its
// predecessor), by buffer key, so the report says how many events waited
// in a buffer, how many were applied from it and how long the longest
// waited.
type orderWitness struct {
	mu         sync.Mutex
	attempts   map[string][]gateAttempt // by ordering item key
	buffered   map[string]time.Time     // buffer key → first committed Put
	bufferSent map[string]time.Time     // buffer key → first Put attempt not refused
	drained    map[string]time.Time     // buffer key → first committed apply
	entries    map[string]*commitWindow // "<table>/ENTRY#<event_id>" → when it committed
	// gateAndEffect counts, by table, ordered transactions DynamoDB
	// cancelled with the gate's condition and an effect's condition
	// failing together (an effect that depends on its predecessor's,
	// meeting it while it commits: the gate decides).
	gateAndEffect map[string]int
}

// commitWindow bounds when a write committed: no earlier than earliest
// (the first attempt not refused was sent), no later than latest (the
// first committed attempt answered; zero: not known to have committed).
type commitWindow struct {
	earliest, latest time.Time
}

type outcome int

const (
	committed outcome = iota
	refused
	unknown
)

type gateAttempt struct {
	seq        int64
	sent, done time.Time
	outcome    outcome
}

func newOrderWitness() *orderWitness {
	return &orderWitness{attempts: map[string][]gateAttempt{}, buffered: map[string]time.Time{}, bufferSent: map[string]time.Time{}, drained: map[string]time.Time{},
		entries: map[string]*commitWindow{}, gateAndEffect: map[string]int{}}
}

// txInfo is what the witness reads from one TransactWriteItems input.
type txInfo struct {
	gate       gateRef
	hasGate    bool
	gateIndex  int      // the gate's action index
	gateTable  string   // the gate's table
	bufPuts    []string // buffer items put
	bufApplied []string // buffer items deleted with a gate (applied)
	entries    []string // "<table>/ENTRY#…" items put
}

type witnessGateKey struct{}

// option installs the witness in an SDK client's stack.
func (w *orderWitness) option(st *middleware.Stack) error {
	if err := st.Initialize.Add(middleware.InitializeMiddlewareFunc("chaos.orderWitness.gate", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if p, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
			if info := inspect(p); info.hasGate || len(info.bufPuts) > 0 || len(info.entries) > 0 {
				ctx = middleware.WithStackValue(ctx, witnessGateKey{}, info)
			}
		}
		return next.HandleInitialize(ctx, in)
	}), middleware.After); err != nil {
		return err
	}
	return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("chaos.orderWitness.commit", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		info, ok := middleware.GetStackValue(ctx, witnessGateKey{}).(txInfo)
		if !ok {
			return next.HandleFinalize(ctx, in)
		}
		sent := time.Now()
		out, md, err := next.HandleFinalize(ctx, in)
		o := unknown
		var re interface{ HTTPStatusCode() int } // smithyhttp/awshttp.ResponseError
		switch {
		case err == nil:
			o = committed
		case errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500:
			o = refused
		}
		if info.hasGate {
			w.record(info.gate.key, gateAttempt{seq: info.gate.seq, sent: sent, done: time.Now(), outcome: o})
			if te, ok := outbox.AsTxError(outbox.TranslateTxError(err)); err != nil && ok && te.ConditionFailed(info.gateIndex) && !te.ConditionFailed(dedup.MarkerIndex) {
				for i := dedup.MarkerIndex + 1; i < info.gateIndex; i++ {
					if te.ConditionFailed(i) {
						w.mu.Lock()
						w.gateAndEffect[info.gateTable]++
						w.mu.Unlock()
						break
					}
				}
			}
		}
		w.recordBuffer(info, sent, o)
		w.recordEntries(info, sent, o)
		return out, md, err
	}), middleware.After)
}

type gateRef struct {
	key string
	seq int64
}

func (w *orderWitness) record(key string, a gateAttempt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.attempts[key] = append(w.attempts[key], a)
}

// recordBuffer notes buffer writes and applies. A buffer write counts from
// its first attempt that was not refused (its answer may be lost: the
// fault injector discards some); it is known to have committed when it
// answered 200 or when the item was later applied from the buffer.
func (w *orderWitness) recordBuffer(info txInfo, sent time.Time, o outcome) {
	if o == refused {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range info.bufPuts {
		if _, ok := w.bufferSent[k]; !ok {
			w.bufferSent[k] = sent
		}
		if _, ok := w.buffered[k]; !ok && o == committed {
			w.buffered[k] = now
		}
	}
	if o != committed {
		return
	}
	for _, k := range info.bufApplied {
		if _, ok := w.drained[k]; !ok {
			w.drained[k] = now
		}
	}
}

// recordEntries notes the commit window of the entries a transaction puts.
func (w *orderWitness) recordEntries(info txInfo, sent time.Time, o outcome) {
	if o == refused || len(info.entries) == 0 {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range info.entries {
		cw := w.entries[k]
		if cw == nil {
			cw = &commitWindow{earliest: sent}
			w.entries[k] = cw
		}
		if o == committed && cw.latest.IsZero() {
			cw.latest = now
		}
	}
}

// entryWindow returns the commit window of the entry of eventID in table,
// and false when no transaction putting it was seen (an entry copied from
// a backup, or never booked).
func (w *orderWitness) entryWindow(table, eventID string) (commitWindow, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cw, ok := w.entries[table+"/"+entryPrefix+eventID]
	if !ok {
		return commitWindow{}, false
	}
	return *cw, true
}

// heldBefore returns the lowest sequence of aggregate aggregateID that
// consumer certainly held in its buffer before t (its buffer Put answered
// 200 before t), and 0 when none. Buffer keys name the consumer, not the
// table: use it for a consumer name no other table shares.
func (w *orderWitness) heldBefore(consumer, aggregateType, aggregateID string, t time.Time) int64 {
	prefix := consumer + dedup.BufferInfix + aggregateType + "#" + aggregateID + "#"
	w.mu.Lock()
	defer w.mu.Unlock()
	var low int64
	for k, at := range w.buffered {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || !at.Before(t) {
			continue
		}
		if seq, err := strconv.ParseInt(rest, 10, 64); err == nil && (low == 0 || seq < low) {
			low = seq
		}
	}
	return low
}

// gateAndEffectFailed returns how many ordered transactions on table were
// cancelled with the gate's and an effect's conditions failing together.
func (w *orderWitness) gateAndEffectFailed(table string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gateAndEffect[table]
}

// entryPrefix is the key prefix of ledger-shaped entries (ledger.EntryPrefix;
// the funds consumer's entries use it too).
const entryPrefix = ledger.EntryPrefix

// inspect reads a transaction: the ordering gate an ordered Apply's
// transaction sets (gateOf), the buffer items it puts, and those it deletes
// together with a gate (a buffered event applied).
func inspect(p *dynamodb.TransactWriteItemsInput) txInfo {
	var info txInfo
	info.gate.key, info.gate.seq, info.gateIndex, info.hasGate = gateOf(p)
	if info.hasGate {
		info.gateTable = aws.ToString(p.TransactItems[info.gateIndex].Update.TableName)
	}
	for _, it := range p.TransactItems {
		switch {
		case it.Put != nil:
			pk, _ := it.Put.Item[dedup.AttrPK].(*types.AttributeValueMemberS)
			switch {
			case pk == nil:
			case strings.Contains(pk.Value, dedup.BufferInfix):
				info.bufPuts = append(info.bufPuts, pk.Value)
			case strings.HasPrefix(pk.Value, entryPrefix):
				info.entries = append(info.entries, aws.ToString(it.Put.TableName)+"/"+pk.Value)
			}
		case it.Delete != nil && info.hasGate:
			if pk, _ := it.Delete.Key[dedup.AttrPK].(*types.AttributeValueMemberS); pk != nil && strings.Contains(pk.Value, dedup.BufferInfix) {
				info.bufApplied = append(info.bufApplied, pk.Value)
			}
		}
	}
	return info
}

// gateOf returns the ordering item ("<table>/<key>"), the sequence a
// transaction sets as the aggregate's last applied sequence and the index
// of that action: the value its Update of an
// ordering item assigns to dedup.AttrLastSequence ("SET #n = :v"). A
// resequencer buffer write also updates the ordering item but sets no
// last_sequence (it only reads it in its condition): it is no gate.
func gateOf(p *dynamodb.TransactWriteItemsInput) (string, int64, int, bool) {
	for i, it := range p.TransactItems {
		u := it.Update
		if u == nil {
			continue
		}
		pk, _ := u.Key[dedup.AttrPK].(*types.AttributeValueMemberS)
		if pk == nil || !strings.Contains(pk.Value, dedup.SequenceInfix) {
			continue
		}
		if seq, ok := assigned(u, dedup.AttrLastSequence); ok {
			return aws.ToString(u.TableName) + "/" + pk.Value, seq, i, true
		}
	}
	return "", 0, -1, false
}

// assigned returns the number an update expression's SET assigns to attr.
func assigned(u *types.Update, attr string) (int64, bool) {
	expr := aws.ToString(u.UpdateExpression)
	for name, a := range u.ExpressionAttributeNames {
		if a != attr {
			continue
		}
		i := strings.Index(expr, name+" = ")
		if i < 0 {
			continue
		}
		ref := expr[i+len(name)+3:]
		if end := strings.IndexAny(ref, ", \n)"); end >= 0 {
			ref = ref[:end]
		}
		if n, ok := u.ExpressionAttributeValues[ref].(*types.AttributeValueMemberN); ok {
			if x, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				return x, true
			}
		}
	}
	return 0, false
}

// bufferStats returns how many events waited in a buffer, how many were
// applied from it, the longest wait (buffered → applied, or → now while
// still waiting) and how many waited longer than alarmAfter (the
// OldestBufferedAgeSeconds alarm's threshold: each would have paged).
func (w *orderWitness) bufferStats(alarmAfter time.Duration) (buffered, drained int, longest time.Duration, alarms int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	seen := map[string]bool{}
	for k := range w.buffered {
		seen[k] = true
	}
	for k := range w.drained {
		seen[k] = true // applied from the buffer: it was put, whatever its answer said
	}
	for k := range seen {
		put, ok := w.bufferSent[k]
		if !ok {
			continue
		}
		end, ok := w.drained[k]
		if !ok {
			end = now
		}
		wait := end.Sub(put)
		longest = max(longest, wait)
		if wait > alarmAfter {
			alarms++
		}
	}
	return len(seen), len(w.drained), longest, alarms
}

// audit returns how many sequences it saw committed, the inversions (a
// higher sequence certainly committed before a lower one of the same
// ordering item) and up to 20 descriptions of them. floor gives, by
// ordering item ("<table>/<key>"), a starting point: the sequences at or
// below it were applied elsewhere (a backup's) or belong to the time
// before a starting point, so this table never commits them and an
// attempt on them (a duplicate) bounds no commit. nil: none.
func (w *orderWitness) audit(floor map[string]int64) (witnessed, inversions int, problems []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.attempts))
	for k := range w.attempts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	type bounds struct {
		earliest, latest time.Time // commit window; zero: unknown
	}
	for _, k := range keys {
		by := map[int64]*bounds{}
		for _, a := range w.attempts[k] {
			b := by[a.seq]
			if b == nil {
				b = &bounds{}
				by[a.seq] = b
			}
			if a.outcome != refused && (b.earliest.IsZero() || a.sent.Before(b.earliest)) {
				b.earliest = a.sent
			}
			if a.outcome == committed && (b.latest.IsZero() || a.done.Before(b.latest)) {
				b.latest = a.done
			}
		}
		seqs := make([]int64, 0, len(by))
		for seq, b := range by {
			if !b.latest.IsZero() {
				witnessed++
			}
			seqs = append(seqs, seq)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for i, lo := range seqs {
			if lo <= floor[k] {
				continue
			}
			for _, hi := range seqs[i+1:] {
				l, h := by[lo], by[hi]
				if h.latest.IsZero() || l.earliest.IsZero() || !h.latest.Before(l.earliest) {
					continue
				}
				inversions++
				if len(problems) < 20 {
					problems = append(problems, fmt.Sprintf("%s: sequence %d committed by %s, before sequence %d was first sent at %s",
						k, hi, h.latest.Format(time.RFC3339Nano), lo, l.earliest.Format(time.RFC3339Nano)))
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
