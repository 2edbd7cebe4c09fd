package stack

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// GIVEN the custom stack, whose consumers scale in provisioned mode (2..5
// pollers)
// WHEN their SQS event source mappings are read
// THEN each has ProvisionedPollerConfig {MinimumPollers 2, MaximumPollers 5}
// and no MaximumConcurrency (Lambda does not allow both); the default
// stack's mappings use MaximumConcurrency and no provisioned pollers.
func TestProvisionedModeReplacesMaximumConcurrency(t *testing.T) {
	for name, c := range custom.stack.Consumers {
		esm := custom.props(t, mappingOf(t, custom, custom.id(c.Function)))
		if !jsonEqual(t, esm["ProvisionedPollerConfig"], map[string]any{"MinimumPollers": 2, "MaximumPollers": 5}) {
			t.Errorf("custom %s: ProvisionedPollerConfig = %v", name, esm["ProvisionedPollerConfig"])
		}
		if esm["ScalingConfig"] != nil {
			t.Errorf("custom %s: ScalingConfig = %v alongside provisioned pollers", name, esm["ScalingConfig"])
		}
	}
	for name, c := range def.stack.Consumers {
		esm := def.props(t, mappingOf(t, def, def.id(c.Function)))
		if esm["ProvisionedPollerConfig"] != nil || !jsonEqual(t, esm["ScalingConfig"], map[string]any{"MaximumConcurrency": config.DefaultConsumerMaxConcurrency}) {
			t.Errorf("default %s: ProvisionedPollerConfig %v, ScalingConfig %v", name, esm["ProvisionedPollerConfig"], esm["ScalingConfig"])
		}
	}
}

// GIVEN an account whose Lambda concurrency quota leaves nothing to reserve
// WHEN the stack is built with no reservation anywhere ({"*": -1})
// THEN without AcceptConsumerThrottles it is refused, naming the consumers'
// throttled receives; with it the template reserves nothing (the reconciler
// included) and synth warns about the unreserved consumers.
func TestReservedConcurrencyIsOptionalEverywhere(t *testing.T) {
	none := map[string]int{AllFunctions: NoReservedConcurrency}
	_, err := NewOrdersStack(awscdk.NewApp(nil), "Refused", OrdersStackProps{AssetRoot: assetRoot, ReservedConcurrency: none})
	if !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), "maxReceiveCount") || !strings.Contains(err.Error(), "AcceptConsumerThrottles") {
		t.Errorf("unreserved consumers without AcceptConsumerThrottles: err = %v, want ErrInvalidProps naming maxReceiveCount and AcceptConsumerThrottles", err)
	}
	st, err := NewOrdersStack(awscdk.NewApp(nil), "Unreserved", OrdersStackProps{AssetRoot: assetRoot, ReservedConcurrency: none, AcceptConsumerThrottles: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := synth(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range s.ofType("AWS::Lambda::Function") {
		if r := s.props(t, id)["ReservedConcurrentExecutions"]; r != nil {
			t.Errorf("function %s reserves %v", id, r)
		}
	}
	warnings := assertions.Annotations_FromStack(st.Stack).FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*no reserved concurrency.*")))
	if len(*warnings) != 1 {
		t.Errorf("%d warnings about unreserved consumers, want 1", len(*warnings))
	}
	if got := st.Props().ReservedTotal(); got != 0 {
		t.Errorf("ReservedTotal = %d, want 0", got)
	}
}

// GIVEN the account's Lambda concurrency quota (AccountConcurrency)
// WHEN the props are validated
// THEN reservations that leave less than 100 unreserved are refused with the
// quota the account needs (207 with the defaults: 20 + 20 + 1 + 3 × 22 +
// 100), consumers without reservation whose mappings could start more
// invocations than the unreserved pool holds are refused, and the default
// stack's synth output says what an account needs.
func TestPreflightChecksTheAccountConcurrency(t *testing.T) {
	defaults := OrdersStackProps{AssetRoot: "x"}
	need := defaults.ReservedTotal() + MinUnreservedConcurrency
	if want := 20 + 20 + 1 + 3*config.DefaultConsumerMaxConcurrency + 100; need != want {
		t.Errorf("default stack needs a quota of %d, want %d", need, want)
	}
	small := OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 2}}
	none := map[string]int{AllFunctions: NoReservedConcurrency}
	cases := []struct {
		name  string
		p     OrdersStackProps
		quota int
		ok    bool
	}{
		{"default quota", defaults, 1000, true},
		{"just enough", defaults, need, true},
		{"one short", defaults, need - 1, false},
		{"new account, defaults", defaults, 100, false},
		{"quota 10, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none, AcceptConsumerThrottles: true}, 10, false},
		{"quota 10, nothing reserved, consumers at 2", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none, AcceptConsumerThrottles: true, ConsumerScaling: small.ConsumerScaling}, 10, true},
		{"quota 50, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none, AcceptConsumerThrottles: true}, 50, false},
		{"quota 100, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none, AcceptConsumerThrottles: true}, 100, true},
		{"unknown quota", defaults, 0, true},
	}
	for _, c := range cases {
		p := c.p
		p.AccountConcurrency = c.quota
		err := p.Validate()
		if c.ok && err != nil {
			t.Errorf("%s: Validate() = %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalidProps) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidProps", c.name, err)
		}
	}
	p := defaults
	p.AccountConcurrency = 100
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at least %d", need)) ||
		!strings.Contains(err.Error(), "get-account-settings") {
		t.Errorf("error %v does not say the quota the account needs (%d) and how to read it", err, need)
	}
	infos := assertions.Annotations_FromStack(def.stack.Stack).FindInfo(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(fmt.Sprintf(".*must be at least %d.*", need))))
	if len(*infos) != 1 {
		t.Errorf("default stack: %d synth messages saying the account needs %d, want 1", len(*infos), need)
	}
}
