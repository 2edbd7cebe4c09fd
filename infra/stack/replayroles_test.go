package stack

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// Issue 32 item 3 (c): replay principals are role ARNs of the deploying
// account, attached as such.

// GIVEN the custom stack, whose replay role is
// arn:aws:iam::123456789012:role/ops/ddb-outbox-replay (a path), synthesized
// without knowing the account it deploys to
// WHEN the replay policy is read
// THEN it is attached to the role's name (IAM attaches by name, the path
// dropped) only when the stack deploys to account 123456789012: its Roles
// are Fn::If on a condition Fn::Equals [AWS::AccountId, "123456789012"],
// else AWS::NoValue. A same-named role of another account gets nothing.
func TestReplayPolicyIsAttachedInTheRolesAccountOnly(t *testing.T) {
	pol := custom.props(t, custom.id(custom.stack.ReplayPolicy))
	roles, _ := pol["Roles"].(map[string]any)
	ifs, _ := roles["Fn::If"].([]any)
	if len(ifs) != 3 {
		t.Fatalf("replay policy Roles = %v, want Fn::If [condition, [the role's name], AWS::NoValue]", normalize(t, pol["Roles"]))
	}
	cond, _ := ifs[0].(string)
	if !jsonEqual(t, ifs[1], []any{"ddb-outbox-replay"}) || !jsonEqual(t, ifs[2], ref("AWS::NoValue")) {
		t.Errorf("replay policy Roles = %v, want [ddb-outbox-replay] or nothing", normalize(t, roles))
	}
	got := get(custom.json, "Conditions", cond)
	if !jsonEqual(t, got, map[string]any{"Fn::Equals": []any{ref("AWS::AccountId"), "123456789012"}}) {
		t.Errorf("condition %s = %v, want Fn::Equals [AWS::AccountId, 123456789012]", cond, normalize(t, got))
	}
}

// GIVEN replay role ARNs that are not roles of one account
// WHEN the props are validated
// THEN each is refused with an error naming it: a user, a wildcard, a
// malformed ARN, and roles of two accounts (an archive has no resource
// policy, so only roles of the account that owns it can replay it: at most
// one account can be the right one).
func TestReplayRoleArnsAreRolesOfOneAccount(t *testing.T) {
	for _, c := range []struct {
		name string
		arns []string
		want string
	}{
		{"user", []string{"arn:aws:iam::123456789012:user/alice"}, "user/alice"},
		{"wildcard", []string{"arn:aws:iam::123456789012:role/ops-*"}, "ops-*"},
		{"no account", []string{"arn:aws:iam:::role/replayer"}, "role/replayer"},
		{"two accounts", []string{"arn:aws:iam::123456789012:role/a", "arn:aws:iam::210987654321:role/b"}, "210987654321"},
	} {
		err := OrdersStackProps{AssetRoot: "x", ReplayRoleArns: c.arns}.Validate()
		if !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidProps naming %q", c.name, err, c.want)
		}
	}
	ok := OrdersStackProps{AssetRoot: "x", ReplayRoleArns: []string{"arn:aws:iam::123456789012:role/ops/team/replayer", "arn:aws:iam::123456789012:role/b"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("roles of one account, one with a path: %v", err)
	}
}

// GIVEN the account the stack deploys to, known at synth (DeployAccount,
// from CDK_DEFAULT_ACCOUNT; or StackProps.Env.Account)
// WHEN replay roles of that account, or of another, are given
// THEN a role of that account is attached by its name with no condition;
// a role of another account is refused before anything is synthesized,
// the error naming both accounts and why (no resource policy on archives).
func TestReplayRolesOfAnotherAccountAreRefusedAtSynth(t *testing.T) {
	const role = "arn:aws:iam::123456789012:role/ops/replayer"
	st, err := NewOrdersStack(awscdk.NewApp(nil), "Known", OrdersStackProps{AssetRoot: assetRoot, ReplayRoleArns: []string{role}, DeployAccount: "123456789012"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := synth(st)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.props(t, s.id(st.ReplayPolicy))["Roles"]; !jsonEqual(t, got, []any{"replayer"}) {
		t.Errorf("replay policy Roles = %v, want [replayer] (no condition: the account is known)", normalize(t, got))
	}
	if c := get(s.json, "Conditions", ReplayRolesConditionID); c != nil {
		t.Errorf("condition %s present although the account is known: %v", ReplayRolesConditionID, c)
	}
	for name, p := range map[string]OrdersStackProps{
		"DeployAccount": {AssetRoot: assetRoot, ReplayRoleArns: []string{role}, DeployAccount: "210987654321"},
		"Env.Account": {AssetRoot: assetRoot, ReplayRoleArns: []string{role},
			StackProps: awscdk.StackProps{Env: &awscdk.Environment{Account: jsii.String("210987654321"), Region: jsii.String("eu-west-1")}}},
	} {
		_, err := NewOrdersStack(awscdk.NewApp(nil), "Other", p)
		if !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), "123456789012") || !strings.Contains(err.Error(), "210987654321") ||
			!strings.Contains(err.Error(), "no resource policy") {
			t.Errorf("%s: err = %v, want ErrInvalidProps naming both accounts and the archive's missing resource policy", name, err)
		}
	}
}
