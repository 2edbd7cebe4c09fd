package localrt

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

// The request limits of EventBridge's archive and replay operations, as the
// API Reference states them (API_CreateArchive, API_StartReplay,
// API_ListArchives, API_ListReplays, API_DescribeReplay): the local bus
// refuses what EventBridge refuses, with ValidationException.
const (
	maxDescriptionLength = 512 // Description: at most 512 characters
	minListLimit         = 1   // Limit: 1..100
	maxListLimit         = 100
	maxRuleNameLength    = 64 // a rule's Name (API_DescribeRule): 1..64
)

// namePrefixRE is the NamePrefix pattern of ListArchives and ListReplays.
var namePrefixRE = regexp.MustCompile(`^[.\-_A-Za-z0-9]+$`)

// replayTimeRange bounds EventStartTime and EventEndTime: from the Unix
// epoch (EventBridge's timestamps are epoch seconds; events carry no
// earlier time) to the end of year 9999 (RFC 3339's last instant). AWS
// does not document bounds; refusing the absurd is the harsher reading.
var replayTimeRange = [2]time.Time{time.Unix(0, 0).UTC(), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)}

func validateDescription(what, d string) error {
	if len(d) > maxDescriptionLength {
		return apiErr("ValidationException", "%s Description: %d characters, at most %d", what, len(d), maxDescriptionLength)
	}
	return nil
}

// validateList checks a List call's Limit (1..100 when set), NamePrefix
// (1..maxPrefix characters of [.\-_A-Za-z0-9] when set) and State (one of
// states when set).
func validateList(limit *int32, prefix *string, maxPrefix int, state string, states []string) error {
	if limit != nil && (*limit < minListLimit || *limit > maxListLimit) {
		return apiErr("ValidationException", "Limit %d: must be between %d and %d", *limit, minListLimit, maxListLimit)
	}
	if prefix != nil {
		p := aws.ToString(prefix)
		if p == "" || len(p) > maxPrefix || !namePrefixRE.MatchString(p) {
			return apiErr("ValidationException", "NamePrefix %q: 1 to %d characters of [.-_A-Za-z0-9]", p, maxPrefix)
		}
	}
	if state != "" && !slices.Contains(states, state) {
		return apiErr("ValidationException", "State %q: one of %v", state, states)
	}
	return nil
}

// validateName checks the name a Describe or Cancel call names: 1..max
// characters (an empty name is a ValidationException on AWS, not
// ResourceNotFoundException).
func validateName(field, name string, maxLen int) error {
	if name == "" || len(name) > maxLen {
		return apiErr("ValidationException", "%s %q: 1 to %d characters", field, name, maxLen)
	}
	return nil
}

// requestName is the name a Describe or Cancel request carries, checked
// by validateName, after ctx's own error.
func requestName(ctx context.Context, field string, name *string, maxLen int) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	n := aws.ToString(name)
	return n, validateName(field, n, maxLen)
}

func validateReplayTime(field string, t time.Time) error {
	if t.Before(replayTimeRange[0]) || t.After(replayTimeRange[1]) {
		return apiErr("ValidationException", "%s %s: out of range [%s, %s]", field, t.UTC().Format(time.RFC3339),
			replayTimeRange[0].Format(time.RFC3339), replayTimeRange[1].Format(time.RFC3339))
	}
	return nil
}

func stateStrings[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// entriesCountError is PutEvents' answer to a request with no entries or more
// than MaxPutEventsEntries: a ValidationException whose message is AWS's
// request-validation text. For more than 10 entries it is, as AWS answered
// (recorded 2025-01-08 by LocalStack's AWS-validated snapshot
// test_events.py::TestEvents::test_put_events_exceed_limit_ten_entries):
//
//	1 validation error detected: Value '[PutEventsRequestEntry(time=null,
//	source=S, resources=null, detailType=T, detail=D, eventBusName=B,
//	traceHeader=null, kmsKeyIdentifier=null, internalMetadata=null), ...]'
//	at 'entries' failed to satisfy constraint: Member must have length less
//	than or equal to 10
//
// (one line), each entry's fields as sent, a field not sent as null, Detail
// verbatim. The recording has only unset Time, Resources and TraceHeader:
// how AWS prints a set Time (here java.util.Date's toString, "Sat Jan 01
// 00:00:00 UTC 2022") and Resources (a Java list, "[a, b]") is not
// confirmed. Zero entries get the same framework's "greater than or equal
// to 1" text (Value '[]'; not recorded for EventBridge), and a request
// without Entries its "Member must not be null".
func entriesCountError(entries []ebtypes.PutEventsRequestEntry) error {
	const prefix = "1 validation error detected: "
	var msg string
	switch {
	case entries == nil:
		msg = prefix + "Value null at 'entries' failed to satisfy constraint: Member must not be null"
	case len(entries) == 0:
		msg = prefix + "Value '[]' at 'entries' failed to satisfy constraint: Member must have length greater than or equal to 1"
	default:
		var b strings.Builder
		for i, e := range entries {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(javaEntryString(e))
		}
		msg = fmt.Sprintf("%sValue '[%s]' at 'entries' failed to satisfy constraint: Member must have length less than or equal to %d", prefix, b.String(), MaxPutEventsEntries)
	}
	return &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient, Message: msg}
}

// javaEntryString is e as EventBridge's (Java) request model prints it in a
// validation message: PutEventsRequestEntry(time=..., ..., internalMetadata=null).
func javaEntryString(e ebtypes.PutEventsRequestEntry) string {
	str := func(p *string) string {
		if p == nil {
			return "null"
		}
		return *p
	}
	t := "null"
	if e.Time != nil {
		t = e.Time.UTC().Format("Mon Jan 02 15:04:05 MST 2006")
	}
	res := "null"
	if e.Resources != nil {
		res = "[" + strings.Join(e.Resources, ", ") + "]"
	}
	return fmt.Sprintf("PutEventsRequestEntry(time=%s, source=%s, resources=%s, detailType=%s, detail=%s, eventBusName=%s, traceHeader=%s, kmsKeyIdentifier=null, internalMetadata=null)",
		t, str(e.Source), res, str(e.DetailType), str(e.Detail), str(e.EventBusName), str(e.TraceHeader))
}
