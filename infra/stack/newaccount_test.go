package stack

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// Issue 32 item 2: a default deploy that fits a new account.

// newAccountQuotas are the Lambda concurrency quotas a new account may
// start with (Lambda developer guide, gettingstarted-limits: "New AWS
// accounts have reduced concurrency and memory quotas"; the values are the
// ones seen on new accounts, issue 32).
var newAccountQuotas = []int{10, 50, 100}

// GIVEN the default template
// WHEN the functions' ReservedConcurrentExecutions are summed
// THEN the total is at most what an account of each new-account quota can
// reserve: the quota minus the MinUnreservedConcurrency Lambda keeps
// unreserved, i.e. nothing (Lambda developer guide,
// configuration-concurrency: "You can reserve up to the Unreserved account
// concurrency value minus 100"). A reservation above that fails the
// CloudFormation deploy half-way ("decreases account's
// UnreservedConcurrentExecution below its minimum value").
func TestDefaultTemplateReservesWhatANewAccountCanGive(t *testing.T) {
	total := 0
	for _, id := range def.ofType("AWS::Lambda::Function") {
		if n, ok := def.props(t, id)["ReservedConcurrentExecutions"].(float64); ok {
			total += int(n)
			t.Logf("function %s reserves %v", id, n)
		}
	}
	for _, q := range newAccountQuotas {
		if can := max(q-MinUnreservedConcurrency, 0); total > can {
			t.Errorf("the default template reserves %d concurrent executions; an account of quota %d can reserve %d", total, q, can)
		}
	}
}

// GIVEN the default props
// WHEN they are validated without a quota and with each new-account quota,
// and the default stack's synth messages are read
// THEN without a quota and with 100 they pass and synth says nothing is
// reserved; with 10 or 50 (the consumers' SQS mappings could start 3 × 22
// invocations, more than the account has) synth stops with one message
// naming the quota and the setting that fits it (the largest
// consumerMaxConcurrency whose three consumers fit, at least 2).
func TestNewAccountPath(t *testing.T) {
	defaults := OrdersStackProps{AssetRoot: "x"}
	if err := defaults.Validate(); err != nil {
		t.Errorf("default props: %v", err)
	}
	if got := defaults.ReservedTotal(); got != 0 {
		t.Errorf("default props reserve %d, want 0", got)
	}
	for _, c := range []struct {
		quota int
		fix   string // "" = accepted
	}{
		{100, ""},
		{50, "ddb-outbox:consumerMaxConcurrency=16"},
		{10, "ddb-outbox:consumerMaxConcurrency=3"},
	} {
		p := defaults
		p.AccountConcurrency = c.quota
		err := p.Validate()
		switch {
		case c.fix == "" && err != nil:
			t.Errorf("quota %d: %v", c.quota, err)
		case c.fix != "" && !errors.Is(err, ErrInvalidProps):
			t.Errorf("quota %d: err = %v, want ErrInvalidProps", c.quota, err)
		case c.fix != "":
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("quota of %d", c.quota)) || !strings.Contains(msg, c.fix) || strings.Count(msg, "\n") != 0 {
				t.Errorf("quota %d: error %q, want one line naming the quota and %s", c.quota, msg, c.fix)
			}
		}
	}
	infos := assertions.Annotations_FromStack(def.stack.Stack).FindInfo(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*Nothing is reserved.*")))
	if len(*infos) != 1 {
		t.Errorf("default stack: %d synth messages saying nothing is reserved, want 1", len(*infos))
	}
}
