package localrt

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// RejectDetailTypes returns a PutEventsAPI that answers every entry whose
// DetailType is one of detailTypes with the entry error code (an
// EventBridge PutEvents entry error, HTTP 200: ErrorCodeMalformedDetail or
// ErrorCodeInvalidArgument, both permanent, so the relay parks the record)
// and passes the other entries to next, splicing the answers back in
// request order. It lets the local stack park an event on purpose (outboxdev
// dev -reject-type OrderShipped) to try the parked/redrive flow. It returns
// an error for any other code or an empty detailTypes.
func RejectDetailTypes(next PutEventsAPI, code string, detailTypes ...string) (PutEventsAPI, error) {
	if code != ErrorCodeMalformedDetail && code != ErrorCodeInvalidArgument {
		return nil, fmt.Errorf("localrt: reject code %q: want %s or %s", code, ErrorCodeMalformedDetail, ErrorCodeInvalidArgument)
	}
	if len(detailTypes) == 0 {
		return nil, fmt.Errorf("localrt: RejectDetailTypes needs at least one detail type")
	}
	return &rejecter{next: next, code: code, types: slices.Clone(detailTypes)}, nil
}

type rejecter struct {
	next  PutEventsAPI
	code  string
	types []string
}

// PutEvents rejects the configured detail types and forwards the rest; a
// whole-request error of next is returned as is.
func (r *rejecter) PutEvents(ctx context.Context, params *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if params == nil || len(params.Entries) == 0 {
		return r.next.PutEvents(ctx, params, optFns...)
	}
	out := &eventbridge.PutEventsOutput{Entries: make([]ebtypes.PutEventsResultEntry, len(params.Entries))}
	var passIdx []int
	pass := *params
	pass.Entries = nil
	for i, e := range params.Entries {
		if slices.Contains(r.types, aws.ToString(e.DetailType)) {
			out.Entries[i] = ebtypes.PutEventsResultEntry{ErrorCode: aws.String(r.code),
				ErrorMessage: aws.String(fmt.Sprintf("rejected by the local stack (-reject-type %s)", aws.ToString(e.DetailType)))}
			out.FailedEntryCount++
			continue
		}
		passIdx = append(passIdx, i)
		pass.Entries = append(pass.Entries, e)
	}
	if len(passIdx) == 0 {
		return out, nil
	}
	res, err := r.next.PutEvents(ctx, &pass, optFns...)
	if err != nil {
		return nil, err
	}
	for j, i := range passIdx {
		if j < len(res.Entries) {
			out.Entries[i] = res.Entries[j]
		}
	}
	out.FailedEntryCount += res.FailedEntryCount
	return out, nil
}
