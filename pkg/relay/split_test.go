package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// tooLarge413 is the error an SDK call returns for an HTTP 413 answer.
func tooLarge413() error {
	return &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusRequestEntityTooLarge}},
		Err:      errors.New("Request Entity Too Large"),
	}
}

// tooLargeValidation is EventBridge's whole-request size refusal.
func tooLargeValidation() error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: "Total size of the entries in the request is over the limit.", Fault: smithy.FaultClient}
}

// TestPublisherSplitsARequestRejectedWhole: three envelopes of about 50 KB
// that a bus refuses together (HTTP 413, or a ValidationException about the
// request size) are split and sent again in smaller requests; no request is
// re-sent as it was refused. An entry refused even alone is a permanent
// failure carrying the service's reason (the relay parks it).
func TestPublisherSplitsARequestRejectedWhole(t *testing.T) {
	t.Parallel()
	moreThanOne := func(mk func() error) func([]ebtypes.PutEventsRequestEntry) error {
		return func(e []ebtypes.PutEventsRequestEntry) error {
			if len(e) > 1 {
				return mk()
			}
			return nil
		}
	}
	always := func(mk func() error) func([]ebtypes.PutEventsRequestEntry) error {
		return func([]ebtypes.PutEventsRequestEntry) error { return mk() }
	}
	tests := []struct {
		name       string
		reject     func([]ebtypes.PutEventsRequestEntry) error
		want       relay.PublishStatus
		wantReason string
		wantCalls  int
	}{
		{"HTTP 413 for more than one entry", moreThanOne(tooLarge413), relay.Published, "", 5},
		{"ValidationException (size) for more than one entry", moreThanOne(tooLargeValidation), relay.Published, "", 5},
		{"HTTP 413 even for one entry", always(tooLarge413), relay.PermanentFailure, "HTTP 413", 5},
		{"ValidationException (size) even for one entry", always(tooLargeValidation), relay.PermanentFailure, "Total size of the entries", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			envs := make([]outbox.Envelope, 3)
			for i := range envs {
				envs[i] = envelope(t, fmt.Sprint("big", i), 1, 50*1024)
			}
			eb := &fakeEventBridge{reject: tt.reject}
			res := newPublisher(t, eb, nil).Publish(context.Background(), envs)
			for i, r := range res {
				if r.Status != tt.want {
					t.Errorf("entry %d: %v %s %s, want %v", i, r.Status, r.ErrorCode, r.ErrorMessage, tt.want)
				}
				if tt.want == relay.PermanentFailure && (r.ErrorCode != relay.CodeRequestRejected || !strings.Contains(r.ErrorMessage, tt.wantReason)) {
					t.Errorf("entry %d: code %q reason %q, want %s with %q", i, r.ErrorCode, r.ErrorMessage, relay.CodeRequestRejected, tt.wantReason)
				}
			}
			if eb.callCount() != tt.wantCalls {
				t.Errorf("calls = %d, want %d (3 → 1 + 2, 2 → 1 + 1)", eb.callCount(), tt.wantCalls)
			}
			seen := map[string]int{}
			for _, c := range eb.calls {
				var ids []string
				for _, e := range c {
					ids = append(ids, detailEventID(e))
				}
				key := strings.Join(ids, ",")
				if seen[key]++; seen[key] > 1 {
					t.Errorf("request %s re-sent as it was refused", key)
				}
			}
		})
	}
}

// TestHandleParksAnEntryRejectedWholeAlone: the relay parks an entry that
// PutEvents refuses even alone, with the service's reason in the DLQ
// message, marks the others and reports nothing for retry.
func TestHandleParksAnEntryRejectedWholeAlone(t *testing.T) {
	t.Parallel()
	envs := make([]outbox.Envelope, 3)
	var ev events.DynamoDBEvent
	for i := range envs {
		envs[i] = envelope(t, fmt.Sprint("h", i), 1, 50*1024)
		ev.Records = append(ev.Records, insertRecord(t, envs[i], fmt.Sprintf("40000000000000000000%d", i)))
	}
	eb := &fakeEventBridge{reject: func(e []ebtypes.PutEventsRequestEntry) error {
		if len(e) > 1 || detailEventID(e[0]) == envs[1].EventID {
			return tooLargeValidation()
		}
		return nil
	}}
	f := newRelay(t, eb, &fakeDDB{}, &fakeSQS{})
	resp, err := f.r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %+v, err %v; want every record done", resp, err)
	}
	if len(f.sqs.msgs) != 1 || f.sqs.msgs[0].EventID != envs[1].EventID || f.sqs.msgs[0].ErrorCode != relay.CodeRequestRejected ||
		!strings.Contains(f.sqs.msgs[0].Reason, "Total size of the entries") {
		t.Fatalf("parked messages %+v, want only %s with the service's reason", f.sqs.msgs, envs[1].EventID)
	}
	ups := f.ddb.byPK()
	for i, env := range envs {
		want := "status = PUBLISHED"
		if i == 1 {
			want = "status = PARKED"
		}
		if !strings.Contains(ups["Order#"+env.AggregateID], want) {
			t.Errorf("record %d: %q, want %q", i, ups["Order#"+env.AggregateID], want)
		}
	}
}
