package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/infra/stack"
)

func TestFromContextDefaults(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cdk.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	infra := filepath.Join(root, "infra")
	if err := os.Mkdir(infra, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := fromContext(func(string) any { return nil }, infra)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.stackName != DefaultStackName || !cfg.nag || cfg.props.AssetRoot != filepath.Join(root, "dist") {
		t.Errorf("cfg = %+v", cfg)
	}
	if err := cfg.props.Validate(); err != nil {
		t.Errorf("default props invalid: %v", err)
	}
}

func TestFromContextValues(t *testing.T) {
	ctx := map[string]any{
		ctxStackName:      "Demo",
		ctxAssetRoot:      "/opt/dist",
		ctxAuthMode:       "none",
		ctxDestroy:        true, // JSON value from cdk.json
		ctxNag:            "false",
		ctxBatchSize:      "250", // string from -c
		ctxBatchingWindow: float64(5),
		ctxPendingShards:  "8",
		ctxReconcileRate:  "2",
	}
	cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.props
	if cfg.stackName != "Demo" || cfg.nag || p.AssetRoot != "/opt/dist" || p.AuthMode != stack.AuthNone || !p.Destroy ||
		p.Outbox.BatchSize != 250 || p.Outbox.MaxBatchingWindow != 5*time.Second || p.Outbox.PendingShards != 8 ||
		p.Outbox.ReconcileRate != 2*time.Minute {
		t.Errorf("cfg = %+v", cfg)
	}
}

// GIVEN the security context keys, as cdk.json JSON values and as -c strings
// WHEN the app reads them
// THEN they reach the stack props.
func TestFromContextSecurityKeys(t *testing.T) {
	for name, ctx := range map[string]map[string]any{
		"cdk.json": {
			ctxAssetRoot:                   "/x",
			ctxRouteThrottles:              map[string]any{"POST /orders": map[string]any{"rate": float64(5), "burst": float64(10)}},
			ctxReservedConcurrency:         map[string]any{"api": float64(7), "relay": float64(-1)},
			ctxAccountConcurrency:          float64(1000), // reservations need the quota (issue 32)
			ctxAccessLogRetention:          float64(90),
			ctxPublisherArns:               "arn:aws:iam::123456789012:role/a, arn:aws:iam::123456789012:role/b",
			ctxRedriveRoleArns:             "arn:aws:iam::123456789012:role/ops",
			ctxCustomerManagedKey:          true,
			ctxNotificationsTTL:            "expires_at",
			ctxFulfilmentProviderURL:       "https://api.shipper.example/v1",
			ctxFulfilmentProviderSecretArn: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shipper-AbCdEf",
		},
		"-c": {
			ctxAssetRoot:                   "/x",
			ctxRouteThrottles:              `{"POST /orders":{"rate":5,"burst":10}}`,
			ctxReservedConcurrency:         `{"api":7,"relay":-1}`,
			ctxAccountConcurrency:          "1000",
			ctxAccessLogRetention:          "90",
			ctxPublisherArns:               "arn:aws:iam::123456789012:role/a,arn:aws:iam::123456789012:role/b",
			ctxRedriveRoleArns:             "arn:aws:iam::123456789012:role/ops",
			ctxCustomerManagedKey:          "true",
			ctxNotificationsTTL:            "expires_at",
			ctxFulfilmentProviderURL:       "https://api.shipper.example/v1",
			ctxFulfilmentProviderSecretArn: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shipper-AbCdEf",
		},
	} {
		cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := cfg.props
		if !reflect.DeepEqual(p.RouteThrottles, map[string]stack.Throttle{"POST /orders": {RateLimit: 5, BurstLimit: 10}}) ||
			!reflect.DeepEqual(p.ReservedConcurrency, map[string]int{"api": 7, "relay": stack.NoReservedConcurrency}) ||
			p.AccessLogRetention != awslogs.RetentionDays_THREE_MONTHS ||
			!reflect.DeepEqual(p.PublisherArns, []string{"arn:aws:iam::123456789012:role/a", "arn:aws:iam::123456789012:role/b"}) ||
			!reflect.DeepEqual(p.RedriveRoleArns, []string{"arn:aws:iam::123456789012:role/ops"}) ||
			!p.CustomerManagedKey || p.NotificationsTTLAttribute != "expires_at" ||
			p.FulfilmentProviderURL != "https://api.shipper.example/v1" ||
			p.FulfilmentProviderSecretArn != "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shipper-AbCdEf" {
			t.Errorf("%s: props = %+v", name, p)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: props invalid: %v", name, err)
		}
	}
	bad := map[string]any{ctxAssetRoot: "/x", ctxAccessLogRetention: "10", ctxRouteThrottles: "{not json"}
	if _, err := fromContext(func(k string) any { return bad[k] }, t.TempDir()); err == nil {
		t.Error("want an error for a retention of 10 days and malformed route throttles")
	}
}

func TestFromContextErrors(t *testing.T) {
	ctx := map[string]any{ctxBatchSize: "many", ctxDestroy: "perhaps", ctxAssetRoot: "/x"}
	if _, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir()); err == nil {
		t.Error("want an error for a non-integer batch size and a non-boolean destroy")
	}
}

// GIVEN the operations context keys (alarm topic, account concurrency,
// no reservation, consumer scaling), as cdk.json JSON values and as
// -c strings
// WHEN the app reads them
// THEN they reach the stack props, and the props validate.
func TestFromContextOperationsKeys(t *testing.T) {
	const topic = "arn:aws:sns:eu-west-1:123456789012:ops-alarms"
	for name, ctx := range map[string]map[string]any{
		"cdk.json": {
			ctxAssetRoot:                  "/x",
			ctxAlarmTopicArn:              topic,
			ctxAccountConcurrency:         float64(50),
			ctxReservedConcurrency:        map[string]any{"*": float64(-1)},
			ctxConsumerProvisionedPollers: map[string]any{"min": float64(2), "max": float64(3)},
		},
		"-c": {
			ctxAssetRoot:                  "/x",
			ctxAlarmTopicArn:              topic,
			ctxAccountConcurrency:         "50",
			ctxReservedConcurrency:        `{"*":-1}`,
			ctxConsumerProvisionedPollers: `{"min":2,"max":3}`,
		},
	} {
		cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := cfg.props
		if p.AlarmTopicArn != topic || p.AccountConcurrency != 50 ||
			!reflect.DeepEqual(p.ReservedConcurrency, map[string]int{stack.AllFunctions: stack.NoReservedConcurrency}) ||
			p.ConsumerScaling.Provisioned == nil || *p.ConsumerScaling.Provisioned != (outboxcdk.ProvisionedPollers{Minimum: 2, Maximum: 3}) ||
			p.ConsumerScaling.MaxConcurrency != 0 {
			t.Errorf("%s: props = %+v", name, p)
		}
		// 3 consumers × 3 pollers × 10 = 90 > the 50 an unreserved account of quota 50 has
		if err := p.Validate(); err == nil {
			t.Errorf("%s: consumers that can start 90 invocations pass in an account of 50", name)
		}
		p.ConsumerScaling = outboxcdk.SQSScaling{MaxConcurrency: 5}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: props invalid: %v", name, err)
		}
	}
	cfg, err := fromContext(func(k string) any {
		return map[string]any{ctxAssetRoot: "/x", ctxConsumerMaxConcurrency: "40"}[k]
	}, t.TempDir())
	if err != nil || cfg.props.ConsumerScaling.MaxConcurrency != 40 {
		t.Errorf("consumerMaxConcurrency: %v, %+v", err, cfg.props.ConsumerScaling)
	}
	bad := map[string]any{ctxAssetRoot: "/x", ctxAccountConcurrency: "many", ctxConsumerProvisionedPollers: "{2,3}"}
	if _, err := fromContext(func(k string) any { return bad[k] }, t.TempDir()); err == nil {
		t.Error("want an error for a non-integer account concurrency and malformed pollers")
	}
}

// GIVEN ddb-outbox:reservedConcurrency=recommended, alone and with the
// consumers' scaling and the quota
// WHEN the app reads the context
// THEN the props reserve stack.RecommendedReservations for that scaling
// (api 20, relay 20, reconciler 1, each consumer its mapping's peak), and
// validate only with the quota; without the key nothing is reserved.
func TestFromContextRecommendedReservations(t *testing.T) {
	ctx := map[string]any{ctxAssetRoot: "/x", ctxReservedConcurrency: "recommended", ctxConsumerMaxConcurrency: "30"}
	cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"api": 20, "relay": 20, "reconciler": 1, "ledger": 30, "notifier": 30, "fulfilment": 30}
	if !reflect.DeepEqual(cfg.props.ReservedConcurrency, want) {
		t.Errorf("ReservedConcurrency = %v, want %v", cfg.props.ReservedConcurrency, want)
	}
	if err := cfg.props.Validate(); err == nil {
		t.Error("recommended reservations without a quota validate")
	}
	ctx[ctxAccountConcurrency] = "1000"
	if cfg, err = fromContext(func(k string) any { return ctx[k] }, t.TempDir()); err != nil || cfg.props.Validate() != nil {
		t.Errorf("recommended reservations with quota 1000: %v / %v", err, cfg.props.Validate())
	}
	cfg, err = fromContext(func(k string) any { return map[string]any{ctxAssetRoot: "/x"}[k] }, t.TempDir())
	if err != nil || cfg.props.ReservedTotal() != 0 {
		t.Errorf("default: %v, reserves %d", err, cfg.props.ReservedTotal())
	}
}

// GIVEN CDK_DEFAULT_ACCOUNT as the CDK CLI sets it, unset, or not an account
// WHEN the app reads it
// THEN a 12-digit id becomes the deploy account (so synth refuses replay
// roles of another account) and anything else none.
func TestDeployAccountFromTheCLI(t *testing.T) {
	for v, want := range map[string]string{"123456789012": "123456789012", "": "", "12345": "", "12345678901x": ""} {
		if got := deployAccount(func(k string) string {
			if k == envDefaultAccount {
				return v
			}
			return ""
		}); got != want {
			t.Errorf("CDK_DEFAULT_ACCOUNT=%q: deploy account %q, want %q", v, got, want)
		}
	}
}

// GIVEN ddb-outbox:archiveRetentionDays as a -c string and a cdk.json
// number, forever (-1), no archive (-2) and not a number
// WHEN the app reads it
// THEN it reaches the outbox props (the archive's retention of personal
// data, docs/ARCHIVE.md), and a non-number is an error.
func TestFromContextArchiveRetention(t *testing.T) {
	for v, want := range map[any]int{"30": 30, float64(90): 90, "-1": outboxcdk.KeepArchiveForever, "-2": outboxcdk.NoArchive} {
		cfg, err := fromContext(func(k string) any { return map[string]any{ctxAssetRoot: "/x", ctxArchiveRetention: v}[k] }, t.TempDir())
		if err != nil || cfg.props.Outbox.ArchiveRetentionDays != want {
			t.Errorf("archiveRetentionDays=%v: %v, %d, want %d", v, err, cfg.props.Outbox.ArchiveRetentionDays, want)
		}
	}
	if _, err := fromContext(func(k string) any { return map[string]any{ctxAssetRoot: "/x", ctxArchiveRetention: "a year"}[k] }, t.TempDir()); err == nil {
		t.Error("archiveRetentionDays=\"a year\" accepted")
	}
}
