package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/txoutcome"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Roles of the actions in the transactions the API sends.
const (
	roleOrder  = "order"  // the order Put (action 0)
	roleIdem   = "idem"   // the idempotency record Put (action 1 of a keyed create)
	roleOutbox = "outbox" // the outbox record Put (last action)
)

// cancelFake is a DynamoDB fake for the order repository: GetItem reads
// what committed, and TransactWriteItems cancels with codes[role] for each
// action whenever any of them is not None (the same codes on every
// attempt, so retryable ones outlast the retries). A cancelled
// idempotency Put whose condition failed leaves its record behind, as the
// concurrent create that made the condition fail would have.
type cancelFake struct {
	mu    sync.Mutex
	items map[string]map[string]types.AttributeValue
	codes map[string]string
	calls []*dynamodb.TransactWriteItemsInput
	// reasonsOverride, when set, replaces the CancellationReasons list
	// (message carries the message).
	reasonsOverride func(n int) ([]types.CancellationReason, string)
}

func newCancelFake() *cancelFake {
	return &cancelFake{items: map[string]map[string]types.AttributeValue{}, codes: map[string]string{}}
}

func itemKey(table string, key map[string]types.AttributeValue) string {
	s := table
	for _, n := range []string{"pk", "sk"} {
		if v, ok := key[n].(*types.AttributeValueMemberS); ok {
			s += "|" + v.Value
		}
	}
	return s
}

func roleOf(put *types.Put) string {
	pk, _ := put.Item["pk"].(*types.AttributeValueMemberS)
	switch {
	case pk != nil && strings.HasPrefix(pk.Value, order.KeyPrefixOrder):
		return roleOrder
	case pk != nil && strings.HasPrefix(pk.Value, order.KeyPrefixIdempotency):
		return roleIdem
	}
	return roleOutbox
}

func (f *cancelFake) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &dynamodb.GetItemOutput{Item: f.items[itemKey(aws.ToString(in.TableName), in.Key)]}, nil
}

func (f *cancelFake) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in)
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	cancel := false
	for i, it := range in.TransactItems {
		code := f.codes[roleOf(it.Put)]
		if code == "" {
			code = outbox.ReasonNone
		}
		reasons[i].Code = aws.String(code)
		if code != outbox.ReasonNone {
			cancel = true
		}
	}
	if f.reasonsOverride != nil {
		rs, msg := f.reasonsOverride(len(in.TransactItems))
		return nil, &types.TransactionCanceledException{Message: aws.String(msg), CancellationReasons: rs}
	}
	if cancel {
		for i, it := range in.TransactItems {
			if aws.ToString(reasons[i].Code) == outbox.ReasonConditionalCheckFailed && roleOf(it.Put) == roleIdem {
				f.items[itemKey(aws.ToString(it.Put.TableName), it.Put.Item)] = it.Put.Item
			}
		}
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
	}
	for _, it := range in.TransactItems {
		f.items[itemKey(aws.ToString(it.Put.TableName), it.Put.Item)] = it.Put.Item
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func (f *cancelFake) setCodes(codes map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes = codes
	f.calls = nil
}

func (f *cancelFake) sent() []*dynamodb.TransactWriteItemsInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*dynamodb.TransactWriteItemsInput(nil), f.calls...)
}

const outcomeAttempts = 3

// outcomeAPI returns the API over a real order.Repository on f.
func outcomeAPI(t *testing.T, f *cancelFake) http.Handler {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := outbox.NewWriter(f, outbox.WriterConfig{Source: appenv.EventSource, Table: "outbox"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := order.NewRepository(order.RepositoryConfig{Table: "orders", Client: f, Writer: w, Logger: logger,
		MaxAttempts: outcomeAttempts, BaseBackoff: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Orders: repo, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, method, path, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// outcome is what the API answers and whether the transaction was retried.
type outcome struct {
	status int
	code   string // error code; "" for success
	retry  bool   // sent outcomeAttempts identical transactions
}

// outcomeRule is one row of the precedence table: the first rule whose
// when matches a combination of codes gives its outcome.
type outcomeRule struct {
	name string
	when func(c map[string]string) bool
	want outcome
}

func anyCode(c map[string]string, codes ...string) bool {
	for _, v := range c {
		for _, code := range codes {
			if v == code {
				return true
			}
		}
	}
	return false
}

func allNone(c map[string]string) bool {
	for _, v := range c {
		if v != outbox.ReasonNone {
			return false
		}
	}
	return true
}

func is(role, code string) func(map[string]string) bool {
	return func(c map[string]string) bool { return c[role] == code }
}

func has(codes ...string) func(map[string]string) bool {
	return func(c map[string]string) bool { return anyCode(c, codes...) }
}

func comboName(roles []string, c map[string]string) string {
	parts := make([]string, len(roles))
	for i, r := range roles {
		parts[i] = r + "=" + c[r]
	}
	return strings.Join(parts, ",")
}

// expect returns the outcome of the first matching rule.
func expect(t *testing.T, rules []outcomeRule, c map[string]string) (string, outcome) {
	t.Helper()
	for _, r := range rules {
		if r.when(c) {
			return r.name, r.want
		}
	}
	t.Fatalf("no rule for %v", c)
	return "", outcome{}
}

var (
	throttleCodes = []string{outbox.ReasonThrottling, outbox.ReasonProvisionedThroughput}
	ok201         = outcome{status: http.StatusCreated}
	ok200         = outcome{status: http.StatusOK}
	unprocessable = outcome{status: http.StatusUnprocessableEntity, code: api.CodeValidationFailed}
	unavailable   = outcome{status: http.StatusServiceUnavailable, code: api.CodeUnavailable}
	busyRetry     = outcome{status: http.StatusServiceUnavailable, code: api.CodeUnavailable, retry: true}
	exists        = outcome{status: http.StatusConflict, code: api.CodeAlreadyExists}
	versionClash  = outcome{status: http.StatusConflict, code: api.CodeVersionConflict}
)

// createRules is the outcome precedence of POST /orders (keyed: the
// idempotency record's rule applies; keyless: it never matches).
var createRules = []outcomeRule{
	{"committed", allNone, ok201},
	{"idempotency record exists: replay", is(roleIdem, outbox.ReasonConditionalCheckFailed), ok200},
	{"ValidationError", has(outbox.ReasonValidation), unprocessable},
	{"item collection full", has(outbox.ReasonItemCollectionSize), unavailable},
	{"order exists", is(roleOrder, outbox.ReasonConditionalCheckFailed), exists},
	{"outbox record exists", is(roleOutbox, outbox.ReasonConditionalCheckFailed), exists},
	{"throttled past the retries", has(throttleCodes...), busyRetry},
	{"conflicts past the retries", has(outbox.ReasonTransactionConflict), outcome{status: http.StatusConflict, code: api.CodeRequestInProgress, retry: true}},
}

// updateRules is the outcome precedence of POST /orders/{id}/pay (and
// every command: they send the same transaction shape).
var updateRules = []outcomeRule{
	{"committed", allNone, ok200},
	{"ValidationError", has(outbox.ReasonValidation), unprocessable},
	{"item collection full", has(outbox.ReasonItemCollectionSize), unavailable},
	{"order version changed", is(roleOrder, outbox.ReasonConditionalCheckFailed), versionClash},
	{"outbox holds the next sequence", is(roleOutbox, outbox.ReasonConditionalCheckFailed), versionClash},
	{"throttled past the retries", has(throttleCodes...), busyRetry},
	{"conflicts past the retries", has(outbox.ReasonTransactionConflict), outcome{status: http.StatusConflict, code: api.CodeVersionConflict, retry: true}},
}

func checkOutcome(t *testing.T, rule string, want outcome, w *httptest.ResponseRecorder, calls []*dynamodb.TransactWriteItemsInput) {
	t.Helper()
	if w.Code != want.status {
		t.Fatalf("rule %q: status %d, want %d: %s", rule, w.Code, want.status, w.Body)
	}
	if want.code != "" {
		var e api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != want.code {
			t.Fatalf("rule %q: body %s, want code %s", rule, w.Body, want.code)
		}
	}
	n := 1
	if want.retry {
		n = outcomeAttempts
	}
	if len(calls) != n {
		t.Fatalf("rule %q: %d transactions sent, want %d", rule, len(calls), n)
	}
}

// sameTransaction fails unless every call sent the identical items and
// ClientRequestToken as the first: a retry repeats the same transaction.
func sameTransaction(t *testing.T, calls []*dynamodb.TransactWriteItemsInput, wantToken bool) {
	t.Helper()
	first := calls[0]
	if wantToken && aws.ToString(first.ClientRequestToken) == "" {
		t.Fatal("keyed create without a ClientRequestToken")
	}
	for i, c := range calls[1:] {
		if aws.ToString(c.ClientRequestToken) != aws.ToString(first.ClientRequestToken) {
			t.Fatalf("attempt %d token %q, first %q", i+2, aws.ToString(c.ClientRequestToken), aws.ToString(first.ClientRequestToken))
		}
		a, _ := json.Marshal(first.TransactItems)
		b, _ := json.Marshal(c.TransactItems)
		if string(a) != string(b) {
			t.Fatalf("attempt %d sent another transaction", i+2)
		}
	}
}

const outcomeBody = `{"customer_id":"c-1","amount_minor":1250,"currency":"EUR"}`

// TestCreateCancellationOutcomes: every combination of the seven
// cancellation reason codes at every action of both create transactions
// (keyed: order, idempotency record, outbox; keyless: order, outbox) maps to
// the one outcome createRules names, never 500; a retried create repeats
// the identical transaction with the same token.
func TestCreateCancellationOutcomes(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{true, false} {
		roles := []string{roleOrder, roleOutbox}
		if keyed {
			roles = []string{roleOrder, roleIdem, roleOutbox}
		}
		for _, c := range txoutcome.Combos(roles...) {
			t.Run(fmt.Sprintf("keyed=%v/%s", keyed, comboName(roles, c)), func(t *testing.T) {
				t.Parallel()
				f := newCancelFake()
				h := outcomeAPI(t, f)
				f.setCodes(c)
				var headers []string
				if keyed {
					headers = []string{api.HeaderIdempotencyKey, "key-1"}
				}
				w := serve(h, "POST", "/orders", outcomeBody, headers...)
				rule, want := expect(t, createRules, c)
				calls := f.sent()
				checkOutcome(t, rule, want, w, calls)
				sameTransaction(t, calls, keyed)
			})
		}
	}
}

// TestUpdateCancellationOutcomes: every combination of codes at both
// actions of a command's transaction (order, outbox) maps to the one
// outcome updateRules names, never 500.
func TestUpdateCancellationOutcomes(t *testing.T) {
	t.Parallel()
	roles := []string{roleOrder, roleOutbox}
	for _, c := range txoutcome.Combos(roles...) {
		t.Run(comboName(roles, c), func(t *testing.T) {
			t.Parallel()
			f := newCancelFake()
			h := outcomeAPI(t, f)
			created := serve(h, "POST", "/orders", outcomeBody)
			if created.Code != http.StatusCreated {
				t.Fatalf("create: %d %s", created.Code, created.Body)
			}
			var o order.Order
			if err := json.Unmarshal(created.Body.Bytes(), &o); err != nil {
				t.Fatal(err)
			}
			f.setCodes(c)
			w := serve(h, "POST", "/orders/"+o.ID+"/pay", "")
			rule, want := expect(t, updateRules, c)
			checkOutcome(t, rule, want, w, f.sent())
		})
	}
}

// TestCancellationReasonsUnnamed: a cancellation whose reasons DynamoDB did
// not name (an empty list, a code this version does not know) is retried
// and then 503, never 500; a list given only in the message (older SDKs,
// emulators) is read from it.
func TestCancellationReasonsUnnamed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reasons func(n int) ([]types.CancellationReason, string)
		want    outcome
	}{
		{"empty list, no list in the message", func(int) ([]types.CancellationReason, string) {
			return nil, "Transaction cancelled"
		}, busyRetry},
		{"unknown code", func(n int) ([]types.CancellationReason, string) {
			rs := make([]types.CancellationReason, n)
			for i := range rs {
				rs[i].Code = aws.String("SomethingNew")
			}
			return rs, "Transaction cancelled"
		}, busyRetry},
		{"older spelling NONE with a conflict", func(n int) ([]types.CancellationReason, string) {
			rs := make([]types.CancellationReason, n)
			for i := range rs {
				rs[i].Code = aws.String("NONE")
			}
			rs[n-1].Code = aws.String(outbox.ReasonTransactionConflict)
			return rs, "Transaction cancelled"
		}, outcome{status: http.StatusConflict, code: api.CodeRequestInProgress, retry: true}},
		{"list only in the message: order exists", func(int) ([]types.CancellationReason, string) {
			return nil, "Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed, None]"
		}, exists},
		{"list only in the message: throttled", func(int) ([]types.CancellationReason, string) {
			return nil, "Transaction cancelled, please refer cancellation reasons for specific reasons [None, ThrottlingError]"
		}, busyRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newCancelFake()
			h := outcomeAPI(t, f)
			f.reasonsOverride = tt.reasons
			w := serve(h, "POST", "/orders", outcomeBody)
			checkOutcome(t, tt.name, tt.want, w, f.sent())
		})
	}
}
