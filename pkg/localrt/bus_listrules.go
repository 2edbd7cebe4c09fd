package localrt

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
)

// ListRules lists the bus's rules by name (API_ListRules: NamePrefix of
// 1..64 characters of [.\-_A-Za-z0-9], EventBusName, Limit 1..100; one
// page, no NextToken), each with its ARN, bus, pattern and state (ENABLED).
// ValidationException for a bad Limit or NamePrefix;
// ResourceNotFoundException for another bus.
func (b *Bus) ListRules(ctx context.Context, in *eventbridge.ListRulesInput, _ ...func(*eventbridge.Options)) (*eventbridge.ListRulesOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		in = &eventbridge.ListRulesInput{}
	}
	if err := validateList(in.Limit, in.NamePrefix, maxRuleNameLength, "", nil); err != nil {
		return nil, err
	}
	if bus := aws.ToString(in.EventBusName); bus != "" && !b.isThisBus(bus) || bus == "" && b.cfg.Name != DefaultBusName {
		return nil, apiErr("ResourceNotFoundException", "Event bus %s does not exist.", bus)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := &eventbridge.ListRulesOutput{Rules: []ebtypes.Rule{}}
	for _, r := range b.rules {
		if !strings.HasPrefix(r.rule.Name, aws.ToString(in.NamePrefix)) {
			continue
		}
		pat, _ := r.rule.Pattern.(string)
		if pat == "" {
			raw, _ := json.Marshal(r.rule.Pattern)
			pat = string(raw)
		}
		out.Rules = append(out.Rules, ebtypes.Rule{Name: aws.String(r.rule.Name), Arn: aws.String(b.RuleARN(r.rule.Name)),
			EventBusName: aws.String(b.cfg.Name), EventPattern: aws.String(pat), State: ebtypes.RuleStateEnabled})
	}
	sort.Slice(out.Rules, func(i, j int) bool { return aws.ToString(out.Rules[i].Name) < aws.ToString(out.Rules[j].Name) })
	if l := int(aws.ToInt32(in.Limit)); l > 0 && l < len(out.Rules) {
		out.Rules = out.Rules[:l]
	}
	return out, nil
}
