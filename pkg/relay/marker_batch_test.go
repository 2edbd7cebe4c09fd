package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// batchDDB is a fakeDDB that also has BatchExecuteStatement. stmtErr
// decides each statement's error code by pk ("" = success); callErr fails
// whole calls.
type batchDDB struct {
	fakeDDB
	bmu      sync.Mutex
	batches  [][]ddbtypes.BatchStatementRequest
	stmtErr  func(pk string) ddbtypes.BatchStatementErrorCodeEnum
	callErr  error
	truncate bool // return one response fewer than statements
}

func (f *batchDDB) BatchExecuteStatement(ctx context.Context, in *dynamodb.BatchExecuteStatementInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchExecuteStatementOutput, error) {
	if err := wait(ctx, f.delay); err != nil {
		return nil, err
	}
	f.bmu.Lock()
	defer f.bmu.Unlock()
	f.batches = append(f.batches, in.Statements)
	if f.callErr != nil {
		return nil, f.callErr
	}
	out := &dynamodb.BatchExecuteStatementOutput{}
	for _, st := range in.Statements {
		pk := st.Parameters[4].(*ddbtypes.AttributeValueMemberS).Value
		var code ddbtypes.BatchStatementErrorCodeEnum
		if f.stmtErr != nil {
			code = f.stmtErr(pk)
		}
		r := ddbtypes.BatchStatementResponse{}
		if code != "" {
			r.Error = &ddbtypes.BatchStatementError{Code: code, Message: aws.String("fake " + string(code))}
		}
		out.Responses = append(out.Responses, r)
	}
	if f.truncate {
		out.Responses = out.Responses[1:]
	}
	return out, nil
}

func (f *batchDDB) batchSizes() []int {
	f.bmu.Lock()
	defer f.bmu.Unlock()
	var n []int
	for _, b := range f.batches {
		n = append(n, len(b))
	}
	return n
}

func (f *batchDDB) updateCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.updates)
}

// publishedMarks returns n published marks for aggregates "<prefix>i".
func publishedMarks(t testing.TB, prefix string, n int) []relay.Mark {
	t.Helper()
	marks := make([]relay.Mark, n)
	for i := range marks {
		env := envelope(t, fmt.Sprint(prefix, i), 1, 10)
		marks[i] = relay.Mark{
			Key:      outbox.KeyFor(env.AggregateType, env.AggregateID, 1, 0),
			Envelope: env,
			Result:   relay.Result{Status: relay.Published, EventID: "bus-" + env.EventID},
		}
	}
	return marks
}

func newTestMarker(t *testing.T, ddb relay.UpdateItemAPI, log *slog.Logger) *relay.Marker {
	t.Helper()
	cfg := testConfig().Marker
	cfg.Logger = log
	cfg.Now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	m, err := relay.NewMarker(ddb, &fakeSQS{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("mark %d: %v", i, err)
		}
	}
}

func TestMarkAllBatchesPublishedMarks(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{}
	m := newTestMarker(t, ddb, quietLogger())
	if !m.BatchStatements() {
		t.Fatal("batchDDB not detected")
	}
	marks := publishedMarks(t, "b", 60)
	parked := envelope(t, "parked", 1, 10)
	marks = append(marks, relay.Mark{
		Key: outbox.KeyFor("Order", "parked", 1, 0), Envelope: parked,
		Result: relay.Result{Status: relay.PermanentFailure, ErrorCode: "MalformedDetail"},
	}, relay.Mark{Result: relay.Result{Status: relay.RetryableFailure}})
	noErrors(t, m.MarkAll(context.Background(), marks))

	if got := fmt.Sprint(ddb.batchSizes()); got != "[25 25 10]" && got != "[25 10 25]" && got != "[10 25 25]" {
		t.Errorf("batch sizes %s, want 25, 25, 10", got)
	}
	// The only UpdateItem is the park.
	if got := ddb.byPK(); len(got) != 1 || !strings.Contains(got["Order#parked"], "PARKED") {
		t.Errorf("UpdateItem calls %v", got)
	}
	st := ddb.batches[0][0]
	wantStmt := `UPDATE "outbox" SET "status"=?, "published_at"=?, "expires_at"=?, "bus_event_id"=? REMOVE "pending_shard" WHERE "pk"=? AND "sk"=? AND "status"<>?`
	if aws.ToString(st.Statement) != wantStmt {
		t.Errorf("statement %q", aws.ToString(st.Statement))
	}
	mk := marks[0]
	for _, b := range ddb.batches { // find the statement of marks[0]
		for _, s := range b {
			if s.Parameters[4].(*ddbtypes.AttributeValueMemberS).Value == mk.Key.PK {
				st = s
			}
		}
	}
	var params []string
	for _, p := range st.Parameters {
		switch v := p.(type) {
		case *ddbtypes.AttributeValueMemberS:
			params = append(params, v.Value)
		case *ddbtypes.AttributeValueMemberN:
			params = append(params, "N:"+v.Value)
		}
	}
	expires := time.Date(2026, 1, 9, 3, 4, 5, 0, time.UTC).Unix() // now + 7 days
	want := fmt.Sprint([]string{"PUBLISHED", "2026-01-02T03:04:05Z", fmt.Sprint("N:", expires), mk.Result.EventID, mk.Key.PK, mk.Key.SK, "PUBLISHED"})
	if fmt.Sprint(params) != want {
		t.Errorf("parameters %v, want %v", params, want)
	}
}

func TestMarkAllStatementErrors(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{stmtErr: func(pk string) ddbtypes.BatchStatementErrorCodeEnum {
		switch pk {
		case "Order#s1":
			return ddbtypes.BatchStatementErrorCodeEnumConditionalCheckFailed
		case "Order#s2":
			return ddbtypes.BatchStatementErrorCodeEnumThrottlingError
		case "Order#s3":
			return ddbtypes.BatchStatementErrorCodeEnumInternalServerError
		case "Order#s4":
			return ddbtypes.BatchStatementErrorCodeEnumValidationError
		}
		return ""
	}}
	m := newTestMarker(t, ddb, quietLogger())
	marks := publishedMarks(t, "s", 6)
	errs := m.MarkAll(context.Background(), marks)
	for i, err := range errs {
		var se *relay.StatementError
		switch i {
		case 4:
			if !errors.As(err, &se) || se.Code != "ValidationError" || !strings.Contains(err.Error(), marks[4].Envelope.EventID) {
				t.Errorf("mark 4: %v, want a ValidationError StatementError", err)
			}
		default:
			if err != nil {
				t.Errorf("mark %d: %v", i, err)
			}
		}
	}
	got := ddb.byPK()
	if len(got) != 2 || !strings.Contains(got["Order#s2"], "PUBLISHED") || !strings.Contains(got["Order#s3"], "PUBLISHED") {
		t.Errorf("UpdateItem fallbacks %v, want s2 and s3", got)
	}
	if len(ddb.batchSizes()) != 1 || !m.BatchStatements() {
		t.Errorf("batches %v, batching on %v", ddb.batchSizes(), m.BatchStatements())
	}
}

func TestMarkAllStatementFallbackError(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{stmtErr: func(string) ddbtypes.BatchStatementErrorCodeEnum {
		return ddbtypes.BatchStatementErrorCodeEnumProvisionedThroughputExceeded
	}}
	ddb.fail = func(pk, _ string) error {
		if pk == "Order#f0" {
			return &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("still")}
		}
		return nil
	}
	m := newTestMarker(t, ddb, quietLogger())
	errs := m.MarkAll(context.Background(), publishedMarks(t, "f", 3))
	if errs[0] == nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("errs %v, want only mark 0 failed", errs)
	}
}

func TestMarkAllWholeCallFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		err        error
		remembered bool
	}{
		{"validation", &smithy.GenericAPIError{Code: "ValidationException", Message: "PartiQL not supported"}, true},
		{"unknown operation", &smithy.GenericAPIError{Code: "UnknownOperationException"}, true},
		{"access denied", &smithy.GenericAPIError{Code: "AccessDeniedException"}, true},
		{"transient", errors.New("connection reset"), false},
		{"throttled", &ddbtypes.RequestLimitExceeded{Message: aws.String("slow down")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ddb := &batchDDB{callErr: tc.err}
			var logs bytes.Buffer
			var lmu sync.Mutex
			m := newTestMarker(t, ddb, slog.New(slog.NewTextHandler(lockedWriter{&lmu, &logs}, nil)))
			noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "w", 30)))
			if ddb.updateCount() != 30 {
				t.Errorf("UpdateItem calls %d, want 30", ddb.updateCount())
			}
			calls := len(ddb.batchSizes())
			if calls != 2 {
				t.Errorf("first MarkAll: %d BatchExecuteStatement calls, want 2", calls)
			}
			if m.BatchStatements() == tc.remembered {
				t.Errorf("BatchStatements() = %v after %v", m.BatchStatements(), tc.err)
			}
			noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "x", 30)))
			again := len(ddb.batchSizes()) - calls
			if tc.remembered && again != 0 || !tc.remembered && again != 2 {
				t.Errorf("second MarkAll: %d BatchExecuteStatement calls", again)
			}
			lmu.Lock()
			n := strings.Count(logs.String(), "from now on")
			lmu.Unlock()
			if tc.remembered && n != 1 || !tc.remembered && n != 0 {
				t.Errorf("%d 'from now on' log lines:\n%s", n, logs.String())
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestMarkAllStatementAccessDenied(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{stmtErr: func(string) ddbtypes.BatchStatementErrorCodeEnum {
		return ddbtypes.BatchStatementErrorCodeEnumAccessDenied
	}}
	m := newTestMarker(t, ddb, quietLogger())
	noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "a", 3)))
	if ddb.updateCount() != 3 || m.BatchStatements() {
		t.Errorf("UpdateItem calls %d, batching %v; want 3 and off", ddb.updateCount(), m.BatchStatements())
	}
}

func TestMarkAllResponseCountMismatch(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{truncate: true}
	m := newTestMarker(t, ddb, quietLogger())
	noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "m", 4)))
	if ddb.updateCount() != 4 || !m.BatchStatements() {
		t.Errorf("UpdateItem calls %d, batching %v; want 4 and on", ddb.updateCount(), m.BatchStatements())
	}
}

func TestMarkAllSingleAndRemainder(t *testing.T) {
	t.Parallel()
	ddb := &batchDDB{}
	m := newTestMarker(t, ddb, quietLogger())
	noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "one", 1)))
	if len(ddb.batchSizes()) != 0 || ddb.updateCount() != 1 {
		t.Errorf("one mark: batches %v, updates %d", ddb.batchSizes(), ddb.updateCount())
	}
	noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "r", 26)))
	if fmt.Sprint(ddb.batchSizes()) != "[25]" || ddb.updateCount() != 2 {
		t.Errorf("26 marks: batches %v, updates %d", ddb.batchSizes(), ddb.updateCount())
	}
}

// A client without BatchExecuteStatement marks with UpdateItem.
func TestMarkAllWithoutBatchSupport(t *testing.T) {
	t.Parallel()
	ddb := &fakeDDB{}
	m := newTestMarker(t, ddb, quietLogger())
	if m.BatchStatements() {
		t.Fatal("fakeDDB has no BatchExecuteStatement")
	}
	noErrors(t, m.MarkAll(context.Background(), publishedMarks(t, "u", 30)))
	if len(ddb.byPK()) != 30 {
		t.Errorf("UpdateItem calls %d, want 30", len(ddb.byPK()))
	}
}
