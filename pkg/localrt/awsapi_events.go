package localrt

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

// ArchiveAPI is the archive and replay part of the EventBridge API (and the
// rule lookups a replay needs: DescribeRule, ListRules), with
// the SDK's exact signatures: *Bus and *eventbridge.Client implement it.
// An AWSFront whose EventBridge implements it serves these operations too.
type ArchiveAPI interface {
	CreateArchive(ctx context.Context, params *eventbridge.CreateArchiveInput, optFns ...func(*eventbridge.Options)) (*eventbridge.CreateArchiveOutput, error)
	DescribeArchive(ctx context.Context, params *eventbridge.DescribeArchiveInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeArchiveOutput, error)
	ListArchives(ctx context.Context, params *eventbridge.ListArchivesInput, optFns ...func(*eventbridge.Options)) (*eventbridge.ListArchivesOutput, error)
	StartReplay(ctx context.Context, params *eventbridge.StartReplayInput, optFns ...func(*eventbridge.Options)) (*eventbridge.StartReplayOutput, error)
	DescribeReplay(ctx context.Context, params *eventbridge.DescribeReplayInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeReplayOutput, error)
	ListReplays(ctx context.Context, params *eventbridge.ListReplaysInput, optFns ...func(*eventbridge.Options)) (*eventbridge.ListReplaysOutput, error)
	CancelReplay(ctx context.Context, params *eventbridge.CancelReplayInput, optFns ...func(*eventbridge.Options)) (*eventbridge.CancelReplayOutput, error)
	DescribeRule(ctx context.Context, params *eventbridge.DescribeRuleInput, optFns ...func(*eventbridge.Options)) (*eventbridge.DescribeRuleOutput, error)
	ListRules(ctx context.Context, params *eventbridge.ListRulesInput, optFns ...func(*eventbridge.Options)) (*eventbridge.ListRulesOutput, error)
}

// epoch is an awsJson1_1 timestamp: epoch seconds, maybe fractional.
type epoch float64

func (e *epoch) time() *time.Time {
	if e == nil {
		return nil
	}
	v := float64(*e)
	// Outside the years 1..9999 (or not a number) the value stands for an
	// instant the bus refuses, before int64 conversion can overflow.
	switch {
	case math.IsNaN(v) || v < -62135596800:
		return aws.Time(time.Time{})
	case v > 253402300799:
		return aws.Time(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	whole, frac := math.Modf(v)
	return aws.Time(time.Unix(int64(whole), int64(frac*1e9)).UTC())
}

func toEpoch(t *time.Time) *float64 {
	if t == nil {
		return nil
	}
	// Seconds and nanoseconds apart: UnixNano overflows outside 1678..2262.
	v := float64(t.Unix()) + float64(t.Nanosecond())/1e9
	return &v
}

// replayJSON is a replay in a DescribeReplay or ListReplays answer.
type replayJSON struct {
	ReplayName            *string                    `json:",omitempty"`
	ReplayArn             *string                    `json:",omitempty"`
	Description           *string                    `json:",omitempty"`
	EventSourceArn        *string                    `json:",omitempty"`
	Destination           *ebtypes.ReplayDestination `json:",omitempty"`
	State                 string                     `json:",omitempty"`
	StateReason           *string                    `json:",omitempty"`
	EventStartTime        *float64                   `json:",omitempty"`
	EventEndTime          *float64                   `json:",omitempty"`
	EventLastReplayedTime *float64                   `json:",omitempty"`
	ReplayStartTime       *float64                   `json:",omitempty"`
	ReplayEndTime         *float64                   `json:",omitempty"`
}

// serveArchive answers one archive, replay or rule operation (awsJson1_1).
func (f *AWSFront) serveArchive(w http.ResponseWriter, r *http.Request, api ArchiveAPI, op string) bool {
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	body, err := readRequestBody(r)
	if err != nil {
		writeAWSError(w, "1.1", http.StatusRequestEntityTooLarge, "ValidationException", "", err.Error())
		return true
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	var out any
	switch op {
	case "CreateArchive":
		var in eventbridge.CreateArchiveInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.CreateArchiveOutput
			if res, err = api.CreateArchive(ctx, &in); err == nil {
				out = map[string]any{"ArchiveArn": res.ArchiveArn, "State": res.State, "CreationTime": toEpoch(res.CreationTime)}
			}
		}
	case "DescribeArchive":
		var in eventbridge.DescribeArchiveInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.DescribeArchiveOutput
			if res, err = api.DescribeArchive(ctx, &in); err == nil {
				out = map[string]any{"ArchiveArn": res.ArchiveArn, "ArchiveName": res.ArchiveName, "EventSourceArn": res.EventSourceArn,
					"EventPattern": res.EventPattern, "Description": res.Description, "State": res.State, "RetentionDays": res.RetentionDays,
					"EventCount": res.EventCount, "SizeBytes": res.SizeBytes, "CreationTime": toEpoch(res.CreationTime)}
			}
		}
	case "ListArchives":
		var in eventbridge.ListArchivesInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.ListArchivesOutput
			if res, err = api.ListArchives(ctx, &in); err == nil {
				as := []map[string]any{}
				for _, a := range res.Archives {
					as = append(as, map[string]any{"ArchiveName": a.ArchiveName, "EventSourceArn": a.EventSourceArn, "State": a.State,
						"RetentionDays": a.RetentionDays, "EventCount": a.EventCount, "SizeBytes": a.SizeBytes, "CreationTime": toEpoch(a.CreationTime)})
				}
				out = map[string]any{"Archives": as}
			}
		}
	case "StartReplay":
		var in struct {
			ReplayName, Description, EventSourceArn *string
			EventStartTime, EventEndTime            *epoch
			Destination                             *ebtypes.ReplayDestination
		}
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.StartReplayOutput
			if res, err = api.StartReplay(ctx, &eventbridge.StartReplayInput{ReplayName: in.ReplayName, Description: in.Description,
				EventSourceArn: in.EventSourceArn, EventStartTime: in.EventStartTime.time(), EventEndTime: in.EventEndTime.time(),
				Destination: in.Destination}); err == nil {
				out = map[string]any{"ReplayArn": res.ReplayArn, "State": res.State, "ReplayStartTime": toEpoch(res.ReplayStartTime)}
			}
		}
	case "DescribeReplay":
		var in eventbridge.DescribeReplayInput
		if err = decodeBody(body, &in); err == nil {
			var d *eventbridge.DescribeReplayOutput
			if d, err = api.DescribeReplay(ctx, &in); err == nil {
				out = replayJSON{ReplayName: d.ReplayName, ReplayArn: d.ReplayArn, Description: d.Description, EventSourceArn: d.EventSourceArn,
					Destination: d.Destination, State: string(d.State), StateReason: d.StateReason, EventStartTime: toEpoch(d.EventStartTime),
					EventEndTime: toEpoch(d.EventEndTime), EventLastReplayedTime: toEpoch(d.EventLastReplayedTime),
					ReplayStartTime: toEpoch(d.ReplayStartTime), ReplayEndTime: toEpoch(d.ReplayEndTime)}
			}
		}
	case "ListReplays":
		var in eventbridge.ListReplaysInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.ListReplaysOutput
			if res, err = api.ListReplays(ctx, &in); err == nil {
				rs := []replayJSON{}
				for _, d := range res.Replays {
					rs = append(rs, replayJSON{ReplayName: d.ReplayName, EventSourceArn: d.EventSourceArn, State: string(d.State), StateReason: d.StateReason,
						EventStartTime: toEpoch(d.EventStartTime), EventEndTime: toEpoch(d.EventEndTime), EventLastReplayedTime: toEpoch(d.EventLastReplayedTime),
						ReplayStartTime: toEpoch(d.ReplayStartTime), ReplayEndTime: toEpoch(d.ReplayEndTime)})
				}
				out = map[string]any{"Replays": rs}
			}
		}
	case "CancelReplay":
		var in eventbridge.CancelReplayInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.CancelReplayOutput
			if res, err = api.CancelReplay(ctx, &in); err == nil {
				out = map[string]any{"ReplayArn": res.ReplayArn, "State": res.State}
			}
		}
	case "DescribeRule":
		var in eventbridge.DescribeRuleInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.DescribeRuleOutput
			if res, err = api.DescribeRule(ctx, &in); err == nil {
				out = map[string]any{"Arn": res.Arn, "Name": res.Name, "EventBusName": res.EventBusName, "EventPattern": res.EventPattern, "State": res.State}
			}
		}
	case "ListRules":
		var in eventbridge.ListRulesInput
		if err = decodeBody(body, &in); err == nil {
			var res *eventbridge.ListRulesOutput
			if res, err = api.ListRules(ctx, &in); err == nil {
				rules := make([]map[string]any, 0, len(res.Rules))
				for _, r := range res.Rules {
					rules = append(rules, map[string]any{"Arn": r.Arn, "Name": r.Name, "EventBusName": r.EventBusName, "EventPattern": r.EventPattern, "State": r.State})
				}
				out = map[string]any{"Rules": rules}
			}
		}
	default:
		return false
	}
	if err != nil {
		writeEventsError(w, err)
		return true
	}
	writeJSON(w, "1.1", out)
	return true
}

// decodeBody decodes an awsJson request body; a malformed one is a
// ValidationException.
func decodeBody(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient, Message: "malformed request body: " + err.Error()}
	}
	return nil
}
