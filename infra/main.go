package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/infra/stack"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// Context keys read from cdk.json or `cdk -c key=value`.
const (
	ctxStackName      = "ddb-outbox:stackName"      // string, default DefaultStackName
	ctxAssetRoot      = "ddb-outbox:assetRoot"      // path, default <dir of cdk.json>/dist
	ctxAuthMode       = "ddb-outbox:authMode"       // IAM (default) or NONE
	ctxEventSource    = "ddb-outbox:eventSource"    // default appenv.EventSource
	ctxDestroy        = "ddb-outbox:destroy"        // bool, default false
	ctxNag            = "ddb-outbox:nag"            // bool, default true
	ctxBatchSize      = "ddb-outbox:batchSize"      // int, 1..10000
	ctxBatchingWindow = "ddb-outbox:batchingWindow" // int seconds, 0..300
	ctxPendingShards  = "ddb-outbox:pendingShards"  // int, 1..256
	ctxReconcileRate  = "ddb-outbox:reconcileRate"  // int minutes, >= 1

	// JSON object {"POST /orders": {"rate": 10, "burst": 20}, ...} (or
	// that JSON as a string from -c): per-route throttles
	ctxRouteThrottles = "ddb-outbox:routeThrottles"
	// JSON object {"api": 20, "relay": -1, ...}: reserved concurrency by
	// function (-1: none; "*": every function not named), or the string
	// "recommended" (stack.RecommendedReservations); default none. Any
	// reservation needs ctxAccountConcurrency.
	ctxReservedConcurrency = "ddb-outbox:reservedConcurrency"
	// int: the account's Lambda concurrency quota, for the preflight check
	ctxAccountConcurrency = "ddb-outbox:accountConcurrency"
	// int 2..1000: every consumer's SQS mapping MaximumConcurrency
	ctxConsumerMaxConcurrency = "ddb-outbox:consumerMaxConcurrency"
	// JSON object {"min": 2, "max": 20}: every consumer's SQS mapping in
	// provisioned mode (instead of MaximumConcurrency)
	ctxConsumerProvisionedPollers = "ddb-outbox:consumerProvisionedPollers"
	// ARN of an existing standard SNS topic every alarm notifies; default:
	// the stack creates one
	ctxAlarmTopicArn      = "ddb-outbox:alarmTopicArn"
	ctxAccessLogRetention = "ddb-outbox:accessLogRetentionDays" // int days, a CloudWatch Logs retention value
	ctxPublisherArns      = "ddb-outbox:publisherArns"          // comma-separated exact ARNs
	ctxRedriveRoleArns    = "ddb-outbox:redriveRoleArns"        // comma-separated exact ARNs
	ctxReplayRoleArns     = "ddb-outbox:replayRoleArns"         // comma-separated exact ARNs: outboxctl backfill
	ctxArchiveRetention   = "ddb-outbox:archiveRetentionDays"   // int days; -1 forever, -2 no archive; default 365
	ctxCustomerManagedKey = "ddb-outbox:customerManagedKey"     // bool, default false
	ctxNotificationsTTL   = "ddb-outbox:notificationsTtlAttribute"
	// an OTLP collector layer ARN (e.g. ADOT) for every function: turns
	// the functions' OpenTelemetry spans on; X-Ray active tracing is on
	// either way
	ctxTelemetryLayerArn = "ddb-outbox:telemetryLayerArn"
	// the fulfilment provider's API base URL (https); default the
	// placeholder stack.DefaultFulfilmentProviderURL, with a synth warning
	ctxFulfilmentProviderURL = "ddb-outbox:fulfilmentProviderUrl"
	// complete ARN of an existing secret holding the provider token;
	// default: the stack creates one
	ctxFulfilmentProviderSecretArn = "ddb-outbox:fulfilmentProviderSecretArn" //nolint:gosec // G101: a CDK context key, not a credential

	// Multi-Region mode (issue 34, docs/MULTI-REGION.md): the Regions of
	// the global outbox table, comma-separated (config.ParseRegions), e.g.
	// eu-west-1,eu-central-1. Set, the app synthesizes one stack per
	// Region, named <stackName>-<region>; unset, the one stack as before.
	ctxRegions = "ddb-outbox:regions"
	// the Region whose stack creates the global table and hosts the
	// consumers (required with ctxRegions)
	ctxPrimaryRegion = "ddb-outbox:primaryRegion"
	// the global table's physical name; default <stackName>-outbox
	ctxGlobalTableName = "ddb-outbox:globalTableName"
)

// DefaultStackName is the CloudFormation stack name.
const DefaultStackName = stack.DefaultStackName

// retentionDays maps CloudWatch Logs retention values in days to the CDK's
// enum (the values PutRetentionPolicy accepts).
var retentionDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "infra:", err)
		os.Exit(1)
	}
}

func run() error {
	app := awscdk.NewApp(nil)
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	get := func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
	cfg, err := fromContext(get, cwd)
	if err != nil {
		return err
	}
	cfg.props.DeployAccount = deployAccount(os.Getenv)
	if _, err := newStacks(app, cfg); err != nil {
		return err
	}
	if cfg.nag {
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	}
	app.Synth(nil)
	return nil
}

// appConfig is what the app reads from the CDK context.
type appConfig struct {
	stackName string
	nag       bool
	props     stack.OrdersStackProps
}

// RegionStackName is the name of Region region's stack in multi-Region
// mode: "<stackName>-<region>" (e.g. DdbOutbox-eu-west-1).
func RegionStackName(stackName, region string) string { return stackName + "-" + region }

// newStacks creates the app's stacks: in single-Region mode the one stack
// cfg.stackName, exactly as before; in multi-Region mode
// (cfg.props.MultiRegion) one stack per Region, RegionStackName, each with
// that concrete Region (and the deploy account when known), the primary
// first and every other depending on it (its replica exists once the
// primary's stack has created the global table).
func newStacks(app awscdk.App, cfg appConfig) ([]*stack.OrdersStack, error) {
	m := cfg.props.MultiRegion
	if m == nil {
		st, err := stack.NewOrdersStack(app, cfg.stackName, cfg.props)
		if err != nil {
			return nil, err
		}
		return []*stack.OrdersStack{st}, nil
	}
	order := []string{m.PrimaryRegion}
	for _, r := range m.Regions {
		if r != m.PrimaryRegion {
			order = append(order, r)
		}
	}
	var out []*stack.OrdersStack
	for _, r := range order {
		p := cfg.props
		p.StackProps.Env = &awscdk.Environment{Region: jsii.String(r)}
		if cfg.props.DeployAccount != "" {
			p.StackProps.Env.Account = jsii.String(cfg.props.DeployAccount)
		}
		st, err := stack.NewOrdersStack(app, RegionStackName(cfg.stackName, r), p)
		if err != nil {
			return nil, fmt.Errorf("stack of %s: %w", r, err)
		}
		if len(out) > 0 {
			st.AddStackDependency(out[0].Stack, jsii.String("the primary Region's stack creates the global outbox table this Region's replica belongs to"))
		}
		out = append(out, st)
	}
	return out, nil
}

// fromContext builds the app configuration from context values (get returns
// nil for an unset key; values are strings from the command line or JSON
// values from cdk.json). cwd is where the app runs (infra/ under cdk.json).
func fromContext(get func(string) any, cwd string) (appConfig, error) {
	cfg := appConfig{stackName: DefaultStackName, nag: true}
	var errs []error
	str := func(key string) string {
		switch v := get(key).(type) {
		case nil:
			return ""
		case string:
			return v
		default:
			return fmt.Sprint(v)
		}
	}
	integer := func(key string) int {
		s := str(key)
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s=%q is not an integer", key, s))
		}
		return n
	}
	boolean := func(key string, def bool) bool {
		s := str(key)
		if s == "" {
			return def
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s=%q is not a boolean", key, s))
		}
		return b
	}
	if s := str(ctxStackName); s != "" {
		cfg.stackName = s
	}
	cfg.nag = boolean(ctxNag, true)
	p := &cfg.props
	p.AssetRoot = str(ctxAssetRoot)
	if p.AssetRoot == "" {
		root, err := findUp(cwd, "cdk.json")
		if err != nil {
			errs = append(errs, err)
		}
		p.AssetRoot = filepath.Join(root, "dist")
	} else if !filepath.IsAbs(p.AssetRoot) {
		p.AssetRoot = filepath.Join(cwd, p.AssetRoot)
	}
	p.AuthMode = stack.AuthMode(strings.ToUpper(str(ctxAuthMode)))
	p.EventSource = str(ctxEventSource)
	p.Destroy = boolean(ctxDestroy, false)
	p.Outbox.BatchSize = integer(ctxBatchSize)
	p.Outbox.MaxBatchingWindow = time.Duration(integer(ctxBatchingWindow)) * time.Second
	p.Outbox.PendingShards = integer(ctxPendingShards)
	p.Outbox.ArchiveRetentionDays = integer(ctxArchiveRetention)
	p.Outbox.ReconcileRate = time.Duration(integer(ctxReconcileRate)) * time.Minute
	object := func(key string, dst any) {
		v := get(key)
		var raw []byte
		switch v := v.(type) {
		case nil:
			return
		case string:
			if v == "" {
				return
			}
			raw = []byte(v)
		default:
			var err error
			if raw, err = json.Marshal(v); err != nil {
				errs = append(errs, fmt.Errorf("context %s: %w", key, err))
				return
			}
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			errs = append(errs, fmt.Errorf("context %s=%s is not the expected JSON object: %w", key, raw, err))
		}
	}
	object(ctxRouteThrottles, &p.RouteThrottles)
	p.AccountConcurrency = integer(ctxAccountConcurrency)
	p.ConsumerScaling.MaxConcurrency = integer(ctxConsumerMaxConcurrency)
	object(ctxConsumerProvisionedPollers, &p.ConsumerScaling.Provisioned)
	// after the consumers' scaling: "recommended" reserves their peak
	if str(ctxReservedConcurrency) == stack.ReservationsRecommended {
		p.ReservedConcurrency = p.RecommendedReservations()
	} else {
		object(ctxReservedConcurrency, &p.ReservedConcurrency)
	}
	p.AlarmTopicArn = str(ctxAlarmTopicArn)
	if d := integer(ctxAccessLogRetention); d != 0 {
		r, ok := retentionDays[d]
		if !ok {
			errs = append(errs, fmt.Errorf("context %s=%d is not a CloudWatch Logs retention in days (%v)", ctxAccessLogRetention, d, slices.Sorted(maps.Keys(retentionDays))))
		}
		p.AccessLogRetention = r
	}
	list := func(key string) []string {
		var out []string
		for _, a := range strings.Split(str(key), ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out
	}
	p.PublisherArns = list(ctxPublisherArns)
	p.RedriveRoleArns = list(ctxRedriveRoleArns)
	p.ReplayRoleArns = list(ctxReplayRoleArns)
	p.CustomerManagedKey = boolean(ctxCustomerManagedKey, false)
	p.NotificationsTTLAttribute = str(ctxNotificationsTTL)
	p.TelemetryLayerArn = str(ctxTelemetryLayerArn)
	p.FulfilmentProviderURL = str(ctxFulfilmentProviderURL)
	p.FulfilmentProviderSecretArn = str(ctxFulfilmentProviderSecretArn)
	if s := str(ctxRegions); s != "" {
		regions, err := config.ParseRegions(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s: %w", ctxRegions, err))
		}
		table := str(ctxGlobalTableName)
		if table == "" {
			table = cfg.stackName + "-outbox"
		}
		p.MultiRegion = &outboxcdk.MultiRegionProps{Regions: regions, PrimaryRegion: str(ctxPrimaryRegion), TableName: table}
		if p.MultiRegion.PrimaryRegion == "" {
			errs = append(errs, fmt.Errorf("context %s is required with %s", ctxPrimaryRegion, ctxRegions))
		}
	} else if str(ctxPrimaryRegion) != "" || str(ctxGlobalTableName) != "" {
		errs = append(errs, fmt.Errorf("context %s and %s need %s", ctxPrimaryRegion, ctxGlobalTableName, ctxRegions))
	}
	return cfg, errors.Join(errs...)
}

// envDefaultAccount is the variable the CDK CLI sets for the app to the
// account of the credentials it deploys with, when it can determine it
// (https://docs.aws.amazon.com/cdk/v2/guide/environments.html).
const envDefaultAccount = "CDK_DEFAULT_ACCOUNT"

// deployAccount returns the account the stack will deploy to when the CDK
// CLI said (envDefaultAccount, a 12-digit id), else "": the stack stays
// environment-agnostic either way, the account only lets synth refuse
// replay roles of another account (stack.OrdersStackProps.DeployAccount).
func deployAccount(getenv func(string) string) string {
	a := getenv(envDefaultAccount)
	if len(a) != 12 || strings.Trim(a, "0123456789") != "" {
		return ""
	}
	return a
}

// findUp returns the nearest directory at or above dir that contains name.
func findUp(dir, name string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s found at or above %s; set -c %s=<dir>", name, dir, ctxAssetRoot)
		}
	}
}
