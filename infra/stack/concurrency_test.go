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

// GIVEN no reservation anywhere ({"*": -1}, what the default is since
// issue 32), and the recommended reservations opted in with a quota
// WHEN the stacks are built
// THEN the first reserves nothing (the reconciler included), adds no warning
// and says in its synth info that nothing is reserved; the second reserves
// api 20, relay 20, reconciler 1 and each consumer its SQS mapping's peak
// concurrency (22), and without a quota the same props are refused,
// naming the setting that gives one.
func TestReservedConcurrencyIsOptionalEverywhere(t *testing.T) {
	none := map[string]int{AllFunctions: NoReservedConcurrency}
	st, err := NewOrdersStack(awscdk.NewApp(nil), "Unreserved", OrdersStackProps{AssetRoot: assetRoot, ReservedConcurrency: none})
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
	ann := assertions.Annotations_FromStack(st.Stack)
	if w := ann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*reserved concurrency.*"))); len(*w) != 0 {
		t.Errorf("%d warnings about reserved concurrency, want none", len(*w))
	}
	if i := ann.FindInfo(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*Nothing is reserved.*"))); len(*i) != 1 {
		t.Errorf("%d synth infos saying nothing is reserved, want 1", len(*i))
	}
	if got := st.Props().ReservedTotal(); got != 0 {
		t.Errorf("ReservedTotal = %d, want 0", got)
	}

	rec := OrdersStackProps{AssetRoot: assetRoot}
	rec.ReservedConcurrency = rec.RecommendedReservations()
	if _, err := NewOrdersStack(awscdk.NewApp(nil), "NoQuota", rec); !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), "ddb-outbox:accountConcurrency") {
		t.Errorf("recommended reservations without a quota: err = %v, want ErrInvalidProps naming ddb-outbox:accountConcurrency", err)
	}
	rec.AccountConcurrency = 1000
	rst, err := NewOrdersStack(awscdk.NewApp(nil), "Recommended", rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := synth(rst)
	if err != nil {
		t.Fatal(err)
	}
	c := float64(config.DefaultConsumerMaxConcurrency)
	want := map[string]float64{r.id(rst.APIFunction): 20, r.id(rst.Outbox.Relay): 20, r.id(rst.Outbox.Reconciler): 1}
	for _, name := range consumerNames {
		want[r.id(rst.Consumers[name].Function)] = c
	}
	for id, n := range want {
		if got := r.props(t, id)["ReservedConcurrentExecutions"]; got != n {
			t.Errorf("recommended: function %s reserves %v, want %v", id, got, n)
		}
	}
}

// GIVEN the account's Lambda concurrency quota (AccountConcurrency)
// WHEN props are validated
// THEN the recommended reservations (107) need a quota of at least 207
// (20 + 20 + 1 + 3 × 22 + the 100 Lambda keeps unreserved) and a smaller
// one is refused with the quota the account needs and how to read it;
// consumers without reservation whose mappings could start more
// invocations than the unreserved pool holds are refused; any reservation
// without a quota is refused.
func TestPreflightChecksTheAccountConcurrency(t *testing.T) {
	recommended := OrdersStackProps{AssetRoot: "x"}
	recommended.ReservedConcurrency = recommended.RecommendedReservations()
	need := recommended.ReservedTotal() + MinUnreservedConcurrency
	if want := 20 + 20 + 1 + 3*config.DefaultConsumerMaxConcurrency + 100; need != want {
		t.Errorf("the recommended reservations need a quota of %d, want %d", need, want)
	}
	small := OrdersStackProps{AssetRoot: "x", ConsumerScaling: outboxcdk.SQSScaling{MaxConcurrency: 2}}
	none := map[string]int{AllFunctions: NoReservedConcurrency}
	cases := []struct {
		name  string
		p     OrdersStackProps
		quota int
		ok    bool
	}{
		{"default quota", recommended, 1000, true},
		{"just enough", recommended, need, true},
		{"one short", recommended, need - 1, false},
		{"new account, recommended", recommended, 100, false},
		{"recommended, unknown quota", recommended, 0, false},
		{"quota 10, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none}, 10, false},
		{"quota 10, nothing reserved, consumers at 2", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none, ConsumerScaling: small.ConsumerScaling}, 10, true},
		{"quota 50, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none}, 50, false},
		{"quota 100, nothing reserved, consumers at 22", OrdersStackProps{AssetRoot: "x", ReservedConcurrency: none}, 100, true},
		{"default, unknown quota", OrdersStackProps{AssetRoot: "x"}, 0, true},
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
	p := recommended
	p.AccountConcurrency = 100
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at least %d", need)) ||
		!strings.Contains(err.Error(), "get-account-settings") {
		t.Errorf("error %v does not say the quota the account needs (%d) and how to read it", err, need)
	}
	if msg := recommended.AccountRequirement(); !strings.Contains(msg, fmt.Sprintf("must be at least %d", need)) {
		t.Errorf("AccountRequirement of the recommended reservations = %q, want the quota %d", msg, need)
	}
}
