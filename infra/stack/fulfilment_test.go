package stack

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// The custom stack's fulfilment settings: a real-looking provider and an
// existing secret (the default stack takes the placeholder URL and creates
// its secret).
const (
	customProviderURL    = "https://api.shipper.example/v1"
	customProviderSecret = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shipper-token-AbCdEf"
)

// secretArnOf is how the template names s's provider secret ARN: a Ref to
// the secret the stack created, or the ARN it was given.
func secretArnOf(s *synthesized) any {
	if a := s.stack.Props().FulfilmentProviderSecretArn; a != "" {
		return a
	}
	return ref(s.id(s.stack.ProviderSecret))
}

// GIVEN the default stack
// WHEN the fulfilment consumer is looked up
// THEN routing's fulfilment rule targets its own queue, an SQS event source
// mapping with partial batch responses feeds its function from that queue,
// the queue redrives to a DLQ that alarms on its first message, and the
// queue has a backlog alarm: the same delivery as the other consumers.
func TestFulfilmentConsumerIsFedByItsQueueWithAlarmedDLQ(t *testing.T) {
	c, ok := def.stack.Consumers[routing.ConsumerFulfilment]
	if !ok {
		t.Fatal("no fulfilment consumer")
	}
	queueID, dlqID, fnID := def.id(c.Queue), def.id(c.DLQ.Queue), def.id(c.Function)
	var rules []string
	for _, r := range routing.Rules() {
		if r.Consumer == routing.ConsumerFulfilment {
			rules = append(rules, r.Name)
			if !jsonEqual(t, get(def.props(t, def.id(def.stack.Rules[r.Name])), "Targets", 0, "Arn"), getAtt(queueID, "Arn")) {
				t.Errorf("rule %s does not target the fulfilment queue", r.Name)
			}
		}
	}
	if len(rules) == 0 || len(c.Rules) != len(rules) {
		t.Errorf("fulfilment rules: routing %v, stack %d", rules, len(c.Rules))
	}
	esm := def.props(t, mappingOf(t, def, fnID))
	if !jsonEqual(t, esm["EventSourceArn"], getAtt(queueID, "Arn")) ||
		!jsonEqual(t, esm["FunctionResponseTypes"], []any{"ReportBatchItemFailures"}) {
		t.Errorf("mapping = %v, want its queue with ReportBatchItemFailures", esm)
	}
	if got := get(def.props(t, queueID), "RedrivePolicy", "deadLetterTargetArn"); !jsonEqual(t, got, getAtt(dlqID, "Arn")) {
		t.Errorf("queue redrive target = %v, want its DLQ", got)
	}
	if a := alarmsOn(t, def, "AWS/SQS", "ApproximateNumberOfMessagesVisible", getAtt(dlqID, "QueueName")); len(a) != 1 || a[0]["Threshold"] != float64(0) {
		t.Errorf("DLQ alarms = %v, want one at the first message", a)
	}
	if a := alarmsOn(t, def, "AWS/SQS", "ApproximateAgeOfOldestMessage", getAtt(queueID, "QueueName")); len(a) != 1 {
		t.Errorf("queue backlog alarms = %v, want one", a)
	}
	if a := alarmsOn(t, def, "AWS/Lambda", "Errors", ref(fnID)); len(a) != 1 {
		t.Errorf("function error alarms = %v, want one", a)
	}
}

// GIVEN the default stack (secret created in the stack) and the custom stack
// (an existing secret's ARN)
// WHEN every role's secretsmanager statements are collected
// THEN only the fulfilment role has one, and it allows exactly
// secretsmanager:GetSecretValue on exactly its provider secret.
func TestFulfilmentRoleReadsExactlyItsSecret(t *testing.T) {
	for _, s := range []*synthesized{def, custom} {
		name := *s.stack.StackName()
		role := roleOf(t, s, s.id(s.stack.Consumers[routing.ConsumerFulfilment].Function))
		var found int
		for _, st := range statements(t, s) {
			if !slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "secretsmanager:") }) {
				continue
			}
			found++
			if st.role != role || !slices.Equal(st.actions, []string{"secretsmanager:GetSecretValue"}) ||
				len(st.resources) != 1 || !jsonEqual(t, st.resources[0], secretArnOf(s)) {
				t.Errorf("%s: role %s allows %v on %v; want only the fulfilment role, GetSecretValue on %v",
					name, st.role, st.actions, st.resources, secretArnOf(s))
			}
		}
		if found != 1 {
			t.Errorf("%s: %d secretsmanager statements, want 1", name, found)
		}
	}
	// the custom stack imports its secret; the default stack creates one
	if n := len(def.ofType("AWS::SecretsManager::Secret")); n != 1 {
		t.Errorf("default stack: %d secrets, want 1", n)
	}
	if n := len(custom.ofType("AWS::SecretsManager::Secret")); n != 0 {
		t.Errorf("custom stack: %d secrets, want 0 (it names an existing one)", n)
	}
}

// GIVEN the default and the custom (customer managed key, Destroy) stacks
// WHEN the idempotency table is read
// THEN DynamoDB expires records on idempotency.TTLAttribute, and the table
// is protected and encrypted like the other tables.
func TestIdempotencyTableHasTTL(t *testing.T) {
	for _, c := range []struct {
		s       *synthesized
		protect bool
	}{{def, true}, {custom, false}} {
		p := c.s.props(t, c.s.id(c.s.stack.IdempotencyTable))
		if got := get(p, "TimeToLiveSpecification"); !jsonEqual(t, got, map[string]any{"AttributeName": idempotency.TTLAttribute, "Enabled": true}) {
			t.Errorf("%s: TTL = %v, want %s enabled", *c.s.stack.StackName(), got, idempotency.TTLAttribute)
		}
		if p["DeletionProtectionEnabled"] != c.protect {
			t.Errorf("%s: DeletionProtectionEnabled = %v, want %v", *c.s.stack.StackName(), p["DeletionProtectionEnabled"], c.protect)
		}
	}
	if got := get(custom.props(t, custom.id(custom.stack.IdempotencyTable)), "SSESpecification", "KMSMasterKeyId"); got == nil {
		t.Error("custom stack: idempotency table not encrypted with the customer managed key")
	}
}

// GIVEN the custom stack's provider URL and secret ARN
// WHEN the fulfilment function's environment is read
// THEN the function calls that provider with that secret's token; the
// default stack, with the placeholder URL, warns at synth.
func TestFulfilmentProviderSettings(t *testing.T) {
	env := get(custom.props(t, custom.id(custom.stack.Consumers[routing.ConsumerFulfilment].Function)), "Environment", "Variables")
	if got := get(env, appenv.EnvProviderURL); got != customProviderURL {
		t.Errorf("%s = %v, want %s", appenv.EnvProviderURL, got, customProviderURL)
	}
	if got := get(env, appenv.EnvProviderSecretARN); got != customProviderSecret {
		t.Errorf("%s = %v, want %s", appenv.EnvProviderSecretARN, got, customProviderSecret)
	}
	warnings := func(s *synthesized) int {
		return len(*assertions.Annotations_FromStack(s.stack.Stack).FindWarning(jsii.String("*"),
			assertions.Match_StringLikeRegexp(jsii.String(".*"+strings.ReplaceAll(DefaultFulfilmentProviderURL, ".", "\\.")+".*"))))
	}
	if n := warnings(def); n != 1 {
		t.Errorf("default stack: %d placeholder URL warnings, want 1", n)
	}
	if n := warnings(custom); n != 0 {
		t.Errorf("custom stack: %d placeholder URL warnings, want 0", n)
	}
}

// GIVEN provider URLs and secret ARNs
// WHEN the props are validated
// THEN only an absolute https URL without user info, query or fragment, and
// only a complete secret ARN, are accepted.
func TestFulfilmentPropsValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, secret string
		ok          bool
	}{
		{"", "", true}, // the placeholder
		{customProviderURL, customProviderSecret, true},
		{"https://shipper.example", "", true},
		{"http://shipper.example", "", false}, // the token would travel in clear
		{"shipper.example/v1", "", false},
		{"https://", "", false},
		{"https://user:pw@shipper.example", "", false},
		{"https://shipper.example/v1?key=1", "", false},
		{"https://shipper.example/v1#x", "", false},
		{"", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shipper-token", false}, // partial ARN
		{"", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:*", false},
		{"", "shipper-token", false},
		{"", "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:a/b-AbCdEf", true},
	} {
		err := OrdersStackProps{AssetRoot: "x", FulfilmentProviderURL: c.url, FulfilmentProviderSecretArn: c.secret}.Validate()
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrInvalidProps) {
			t.Errorf("url %q secret %q: Validate() = %v, want ok=%v", c.url, c.secret, err, c.ok)
		}
	}
}

// GIVEN a stack with a customer managed key and no provider secret ARN (the
// one combination the default and custom stacks do not cover)
// WHEN it is synthesized with cdk-nag
// THEN the secret it creates is encrypted with that key, the fulfilment role
// still allows exactly app.Permissions with the key grant (kms:Decrypt of
// the secret included), and cdk-nag finds nothing unsuppressed.
func TestCreatedSecretUsesTheCustomerManagedKey(t *testing.T) {
	st, err := NewOrdersStack(awscdk.NewApp(nil), "KeyedSecret", OrdersStackProps{AssetRoot: assetRoot, CustomerManagedKey: true, Destroy: true})
	if err != nil {
		t.Fatal(err)
	}
	awscdk.Aspects_Of(st.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	s, err := synth(st)
	if err != nil {
		t.Fatal(err)
	}
	ann := assertions.Annotations_FromStack(st.Stack)
	for _, f := range append(*ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))),
		*ann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))...) {
		t.Errorf("cdk-nag: %s: %v", *f.Id, f.Entry.Data)
	}
	if got := s.props(t, s.id(st.ProviderSecret))["KmsKeyId"]; !jsonEqual(t, got, getAtt(s.id(st.EncryptionKey), "Arn")) {
		t.Errorf("secret KmsKeyId = %v, want the stack's key", got)
	}
	checkRoles(t, s, app.FunctionPermissions.WithEncryptionKey)
}
