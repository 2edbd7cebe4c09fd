package localrt

import (
	"context"
	"regexp"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
