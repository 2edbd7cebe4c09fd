package stack

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/notifier"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// functionNames are the functions of the stack (app.Permissions order).
var functionNames = []string{APIFunction, outboxcdk.RelayFunction, outboxcdk.ReconcilerFunction, app.FunctionLedger, app.FunctionNotifier, app.FunctionFulfilment}

// AuthMode is the HTTP API's route authorization.
type AuthMode string

// Authorization modes.
const (
	// AuthIAM requires SigV4-signed requests whose caller has
	// execute-api:Invoke on the route (the default).
	AuthIAM AuthMode = "IAM"
	// AuthNone leaves every route open to the internet. For short-lived
	// demos only; it must be chosen explicitly.
	AuthNone AuthMode = "NONE"
)

// Defaults applied by OrdersStackProps.SetDefaults to zero fields.
const (
	// DefaultConsumerMaxEventAge is how long EventBridge keeps retrying to
	// deliver an event to a consumer's SQS queue (the rule target) before
	// sending it to the rule's DLQ. It bounds delivery to the queue only:
	// once the queue accepted the event, the queue's redrive policy governs
	// retries of the consumer (config.DefaultConsumerMaxReceiveCount).
	DefaultConsumerMaxEventAge = 6 * time.Hour
	// DefaultConsumerRetryAttempts bounds EventBridge's retries of a failed
	// delivery to a consumer's SQS queue (throttling, a missing queue or
	// permission), not the consumer's own failures.
	DefaultConsumerRetryAttempts = 20
	// DefaultThrottleRate is the HTTP API stage's steady-state request rate
	// limit (requests per second).
	DefaultThrottleRate = 100
	// DefaultThrottleBurst is the HTTP API stage's burst limit (requests).
	DefaultThrottleBurst = 200
	// DefaultAPI4xxRatePercent is the threshold of the alarm on the API's
	// 4xx responses as a percentage of its requests (five-minute periods,
	// two of three). Throttled requests (429) count as 4xx.
	DefaultAPI4xxRatePercent = 10
	// DefaultAPI5xxRatePercent is the threshold of the alarm on the API's
	// 5xx responses as a percentage of its requests.
	DefaultAPI5xxRatePercent = 1
	// DefaultStackName is the CloudFormation stack name of the app
	// (infra/main.go). A stack with AuthNone must have another name.
	DefaultStackName = "DdbOutbox"
	// DefaultFulfilmentProviderURL is the fulfilment provider's base URL
	// when none is given: a placeholder in the reserved .invalid TLD
	// (RFC 6761, never resolves), so a stack synthesizes and deploys
	// without one, every shipment call fails and the events wait in the
	// fulfilment DLQ (alarmed) until the real URL is deployed and the DLQ
	// redriven. The stack adds a synth warning (PlaceholderProviderURLWarning)
	// while it is used.
	DefaultFulfilmentProviderURL = "https://fulfilment.invalid"
	// NoReservedConcurrency in ReservedConcurrency leaves a function
	// without reserved concurrency (it shares the account's unreserved
	// pool): outboxcdk.NoReservedConcurrency. Every function not named in
	// ReservedConcurrency has none.
	NoReservedConcurrency = outboxcdk.NoReservedConcurrency
	// AllFunctions, as a ReservedConcurrency key, sets every function the
	// map does not name otherwise, e.g. {"*": -1} for no reservation at all.
	AllFunctions = "*"
	// MinUnreservedConcurrency is the part of an account's Lambda
	// concurrency quota that cannot be reserved (Lambda developer guide,
	// https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html:
	// "You can reserve up to the Unreserved account concurrency value minus
	// 100"). An account whose quota is 100 or less (a new account's may be
	// 10, 50 or 100: "New AWS accounts have reduced concurrency and memory
	// quotas", https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)
	// can reserve nothing; a reservation there fails the deploy with
	// "Specified ReservedConcurrentExecutions for function decreases
	// account's UnreservedConcurrentExecution below its minimum value".
	MinUnreservedConcurrency = 100
	// UnreservedConsumerWarning was the id of the synth warning for a
	// consumer without reserved concurrency.
	//
	// Deprecated: since issue 32 no reservation is the default and no
	// warning is added; AccountRequirement (a synth info message) says what
	// the consumers can start from the unreserved pool.
	UnreservedConsumerWarning = "ddb-outbox:unreservedConsumer"
	// ReservationsRecommended, as the value of the CDK context key
	// ddb-outbox:reservedConcurrency, reserves RecommendedReservations
	// (infra/main.go).
	ReservationsRecommended = "recommended"
)

// Throttle is an HTTP API route's throttling: RateLimit requests per second
// (steady state) and BurstLimit requests (bucket size). Both must be
// positive.
type Throttle struct {
	RateLimit  int `json:"rate"`
	BurstLimit int `json:"burst"`
}

// EventBridge target retry policy limits (RetryPolicy API: maximum event
// age 60..86,400 s, retry attempts 0..185; this stack requires at least one
// retry).
const (
	MinConsumerMaxEventAge   = 60 * time.Second
	MaxConsumerMaxEventAge   = 86400 * time.Second
	MaxConsumerRetryAttempts = 185
	minConsumerRetryAttempts = 1
)

// ErrInvalidProps is wrapped by every error OrdersStackProps.Validate returns.
var ErrInvalidProps = errors.New("stack: invalid props")

// OrdersStackProps configures the orders application stack. Zero fields
// take the defaults.
type OrdersStackProps struct {
	// TelemetryLayerArn, when set, is an OTLP collector Lambda layer (e.g.
	// the AWS Distro for OpenTelemetry collector layer for arm64 in the
	// stack's region) added to every function, which turns the functions'
	// OpenTelemetry spans on (gofunc.Props.TelemetryLayerArn). X-Ray active
	// tracing is on either way. Context: ddb-outbox:telemetryLayerArn.
	TelemetryLayerArn string
	// StackProps are passed to awscdk.NewStack. Leave Env unset to keep the
	// stack environment-agnostic (synth needs no credentials or lookups).
	StackProps awscdk.StackProps
	// AssetRoot is the directory holding <function>/bootstrap for api,
	// relay, reconciler, ledger, notifier and fulfilment (the repository's
	// dist/).
	// Required.
	AssetRoot string
	// AuthMode is the HTTP API authorization. Default AuthIAM.
	AuthMode AuthMode
	// EventSource is the EventBridge Source of published order events.
	// Default appenv.EventSource.
	EventSource string
	// Outbox tunes the outbox construct. Its EventBus, AssetRoot,
	// EventSource, RemovalPolicy and LogRetention are set by the stack.
	Outbox outboxcdk.Props
	// ConsumerMaxEventAge is the rule targets' maximum event age: how long
	// EventBridge retries delivering an event to a consumer's SQS queue
	// before sending it to the rule's DLQ. Whole seconds, 60 s..24 h.
	// Default DefaultConsumerMaxEventAge. It does not bound the consumer's
	// retries (see Consumer).
	ConsumerMaxEventAge time.Duration
	// ConsumerRetryAttempts is the rule targets' retry attempts for failed
	// deliveries to a consumer's SQS queue, 1..185. Default
	// DefaultConsumerRetryAttempts.
	ConsumerRetryAttempts int
	// ThrottleRate and ThrottleBurst are the API stage's default route
	// throttling (requests per second, requests). Defaults
	// DefaultThrottleRate and DefaultThrottleBurst.
	ThrottleRate  int
	ThrottleBurst int
	// Destroy makes `cdk destroy` delete tables, queues and log groups
	// (RemovalPolicy DESTROY). Default false: they are retained.
	Destroy bool
	// LogRetention is the retention of every log group. Default one month.
	LogRetention awslogs.RetentionDays

	// StackName is the stack's name as NewOrdersStack will create it, for
	// validation only: StackProps.StackName when set, else the construct
	// id. NewOrdersStack fills it in; AuthNone requires a name other than
	// DefaultStackName (an open API must never replace the default stack).
	StackName string
	// RouteThrottles are per-route throttles by route key (METHOD + " " +
	// path as in Routes, e.g. "POST /orders"); routes not named keep the
	// stage-wide ThrottleRate and ThrottleBurst. Unknown keys are an error.
	RouteThrottles map[string]Throttle
	// ReservedConcurrency is the reserved concurrency by function name
	// (api, relay, reconciler, ledger, notifier, fulfilment; AllFunctions
	// for every function not named), 1..1000 or NoReservedConcurrency;
	// unnamed functions have none. Default: nothing reserved, so that the
	// stack deploys in any account, a new one's included
	// (MinUnreservedConcurrency); RecommendedReservations is the opt-in
	// set. Any reservation needs AccountConcurrency, which Validate checks
	// it against. The reconciler's is outboxcdk.ReconcilerReservedConcurrency
	// (1) or NoReservedConcurrency. A consumer's, when set, must be at least
	// its mapping's peak concurrency.
	ReservedConcurrency map[string]int
	// AccountConcurrency is the Lambda concurrency quota of the account and
	// region the stack deploys to (`aws lambda get-account-settings --query
	// AccountLimit.ConcurrentExecutions`), for the preflight check: Validate
	// refuses reservations without it, reservations that add up to more
	// than AccountConcurrency − MinUnreservedConcurrency (the deployment
	// would fail with "Specified ReservedConcurrentExecutions for function
	// decreases account's UnreservedConcurrentExecution below its minimum
	// value"), and consumers without a reservation whose mappings together
	// could start more invocations than the unreserved pool holds (one
	// message naming the quota and the consumerMaxConcurrency that fits).
	// 0: unknown; synth reports what the stack reserves (nothing by
	// default) and what the consumers can start.
	AccountConcurrency int
	// AcceptConsumerThrottles let a consumer run without reserved
	// concurrency when reservations were the default.
	//
	// Deprecated: ignored since issue 32. No reservation is the default
	// (the stack must deploy in a new account, whose quota leaves nothing
	// to reserve). A consumer without one shares the account's unreserved
	// pool: when that pool runs out for a visibility timeout its SQS
	// messages are throttled, return to the queue and count toward
	// maxReceiveCount, so a busy account can move events to the consumer's
	// DLQ (alarmed, redrivable; nothing is lost) without any consumer error
	// (docs/PARITY.md). With AccountConcurrency, Validate refuses consumers
	// whose mappings together could start more invocations than the pool
	// holds; RecommendedReservations reserves each consumer's peak.
	AcceptConsumerThrottles bool
	// ConsumerScaling is every consumer's SQS event source mapping scaling:
	// MaximumConcurrency (default config.DefaultConsumerMaxConcurrency) or
	// provisioned mode (outboxcdk.SQSScaling).
	ConsumerScaling outboxcdk.SQSScaling
	// AlarmTopicArn is an existing standard SNS topic every alarm notifies
	// on ALARM and OK. Empty: the stack creates one (output AlarmTopicArn),
	// encrypted with the stack's customer managed key when there is one. An
	// existing topic encrypted with a customer managed key needs a key
	// policy that lets cloudwatch.amazonaws.com use the key.
	AlarmTopicArn string
	// API4xxRatePercent and API5xxRatePercent are the thresholds (percent
	// of requests, 0 < x <= 100) of the API's 4xx and 5xx rate alarms.
	// Defaults DefaultAPI4xxRatePercent and DefaultAPI5xxRatePercent.
	API4xxRatePercent float64
	API5xxRatePercent float64
	// AccessLogRetention is the retention of the HTTP API access log group.
	// Default LogRetention.
	AccessLogRetention awslogs.RetentionDays
	// PublisherArns are IAM principal ARNs, besides the relay's and the
	// reconciler's roles, that the bus policy lets call events:PutEvents
	// (for example a break-glass role). Exact ARNs, no wildcards.
	PublisherArns []string
	// MultiRegion, when set, makes this stack one Region's part of a
	// multi-Region deployment (regions.go, docs/MULTI-REGION.md): the
	// outbox's MultiRegion (outboxcdk.MultiRegionProps, the same in every
	// Region's stack), a bus named MultiRegionBusName, the consumers in
	// PrimaryRegion's stack only and a forwarder to it in the others. The
	// stack needs a concrete Region (StackProps.Env.Region). nil (the
	// default): single-Region mode, unchanged.
	MultiRegion *outboxcdk.MultiRegionProps
	// RedriveRoleArns are IAM role ARNs the consumer queue policies let
	// call sqs:SendMessage, besides EventBridge for the consumer's rules:
	// whoever redrives a consumer DLQ back to its queue (a DLQ redrive
	// sends with the caller's permissions). Empty: nobody but the rules can
	// send to a consumer queue. Exact ARNs, no wildcards.
	RedriveRoleArns []string
	// ReplayRoleArns are IAM role ARNs
	// (arn:<partition>:iam::<account>:role/<path/><name>) granted what
	// outboxctl backfill and replays need on the outbox's archive
	// (OrdersStack.ReplayPolicy, outboxcdk.Outbox.ReplayStatements): start
	// and describe replays of it, to the bus's rules. Empty: nobody is
	// granted. They must be roles of the account the stack deploys to, all
	// of one account: an EventBridge archive has no resource policy (only
	// event buses and schema registries have one), so a role of another
	// account can never be allowed to replay it, and IAM attaches a managed
	// policy to a role by name, in the policy's own account. Validate
	// refuses other forms, several accounts, and (with DeployAccount)
	// another account; the template attaches the policy only when it
	// deploys to the roles' account (a CloudFormation condition), so a
	// same-named role of another account never gets it.
	ReplayRoleArns []string
	// DeployAccount is the 12-digit account the stack deploys to, when
	// known at synth (infra/main.go: CDK_DEFAULT_ACCOUNT, which the CDK CLI
	// sets from the credentials it deploys with,
	// https://docs.aws.amazon.com/cdk/v2/guide/environments.html), or
	// StackProps.Env.Account when that is a literal. Validate refuses
	// ReplayRoleArns of any other account. Empty: not known at synth (the
	// template checks it at deploy time instead).
	DeployAccount string
	// EncryptionKey, when set, is the customer managed KMS key of every
	// table and queue (outbox construct included, overriding
	// Outbox.EncryptionKey); CustomerManagedKey creates one in the stack
	// (rotation on). Default: the AWS managed key aws/dynamodb for tables
	// and SSE-SQS for queues.
	EncryptionKey      awskms.IKey
	CustomerManagedKey bool
	// NotificationsTTLAttribute is the TTL attribute of the notifications
	// table: DynamoDB deletes a notification whose attribute (epoch
	// seconds) is in the past. Default notifier.TTLAttribute, which the
	// notifier writes when NotificationRetention is positive; it must be
	// dedup.TTLAttribute (the same name), which the notifier's dedup
	// markers in that table expire by.
	NotificationsTTLAttribute string
	// NotificationRetention is how long a notification (customer data) is
	// kept, whole seconds (the notifier's NOTIFICATION_RETENTION_SECONDS).
	// Default appenv.DefaultNotificationRetention (90 days); negative keeps
	// notifications forever.
	NotificationRetention time.Duration
	// FulfilmentProviderURL is the fulfilment provider's API base URL (the
	// fulfilment function's FULFILMENT_PROVIDER_URL; paths /shipments...
	// are appended): an absolute https URL with a host and no user info,
	// query or fragment (the provider token travels in its requests).
	// Default DefaultFulfilmentProviderURL, a placeholder that never
	// resolves.
	FulfilmentProviderURL string
	// FulfilmentProviderSecretArn is the complete ARN
	// (arn:<partition>:secretsmanager:<region>:<account>:secret:<name>-<6
	// characters>) of an existing Secrets Manager secret whose SecretString
	// is the provider's API token. Empty: the stack creates the secret
	// (output ProviderSecretArn) with a generated value for the operator
	// to replace. A secret encrypted with a customer managed key other than
	// the stack's needs kms:Decrypt for the fulfilment role in that key's
	// policy.
	FulfilmentProviderSecretArn string
}

// secretCompleteArn matches a complete Secrets Manager secret ARN, the
// random six-character suffix included (GetSecretValue's resource).
var secretCompleteArn = regexp.MustCompile(`^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$`)

// validProviderURL returns nil when u is an absolute https URL with a host
// and no user info, query or fragment.
func validProviderURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("FulfilmentProviderURL %q: %w", u, err)
	case p.Scheme != "https" || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" || p.Opaque != "":
		return fmt.Errorf("FulfilmentProviderURL %q must be an absolute https URL with a host and no user info, query or fragment", u)
	}
	return nil
}

// roleArnPattern matches an IAM role ARN: partition, 12-digit account, an
// optional path (/ … /, characters ! to ~) and the role name (1..64 of
// A–Z, a–z, 0–9 and +=,.@_-) (IAM API reference, Role: Path and RoleName).
var roleArnPattern = regexp.MustCompile(`^arn:(aws[a-z-]*):iam::([0-9]{12}):role/((?:[!-~]+/)?)([A-Za-z0-9+=,.@_-]{1,64})$`)

// accountPattern matches a 12-digit AWS account id.
var accountPattern = regexp.MustCompile(`^[0-9]{12}$`)

// RoleAccount returns the account of IAM role ARN arn, or an error when arn
// is not a role ARN (roleArnPattern).
func RoleAccount(arn string) (string, error) {
	m := roleArnPattern.FindStringSubmatch(arn)
	if m == nil || strings.ContainsAny(arn, "*?") {
		return "", fmt.Errorf("%q is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<path/><name>, no wildcards)", arn)
	}
	return m[2], nil
}

// deployAccount returns the account the stack is known to deploy to at
// synth: DeployAccount, else StackProps.Env.Account when it is a literal
// 12-digit id, else "".
func (p OrdersStackProps) deployAccount() string {
	if p.DeployAccount != "" {
		return p.DeployAccount
	}
	if e := p.StackProps.Env; e != nil && e.Account != nil && accountPattern.MatchString(*e.Account) {
		return *e.Account
	}
	return ""
}

// replayAccount returns the one account of ReplayRoleArns ("" when there
// are none or they do not validate).
func (p OrdersStackProps) replayAccount() string {
	account := ""
	for _, a := range p.ReplayRoleArns {
		acct, err := RoleAccount(a)
		if err != nil || account != "" && acct != account {
			return ""
		}
		account = acct
	}
	return account
}

// validReplayRoles checks ReplayRoleArns: role ARNs, one account, and the
// account the stack deploys to when that is known.
func (p OrdersStackProps) validReplayRoles() []error {
	var errs []error
	accounts := map[string][]string{}
	for _, a := range p.ReplayRoleArns {
		acct, err := RoleAccount(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("ReplayRoleArns: %w", err))
			continue
		}
		accounts[acct] = append(accounts[acct], a)
	}
	const why = "an EventBridge archive has no resource policy, so only roles of the account that owns it can replay it"
	if len(accounts) > 1 {
		errs = append(errs, fmt.Errorf("ReplayRoleArns name roles of %d accounts (%s): %s; give roles of the account the stack deploys to",
			len(accounts), strings.Join(slices.Sorted(maps.Keys(accounts)), ", "), why))
	}
	if d := p.DeployAccount; d != "" && !accountPattern.MatchString(d) {
		errs = append(errs, fmt.Errorf("DeployAccount %q is not a 12-digit account id", d))
	}
	if d := p.deployAccount(); d != "" {
		for acct, arns := range accounts {
			if acct != d {
				errs = append(errs, fmt.Errorf("ReplayRoleArns: %s in account %s, but the stack deploys to account %s: %s; give a role of account %s",
					strings.Join(arns, ", "), acct, d, why, d))
			}
		}
	}
	return errs
}

// SetDefaults replaces zero fields with their defaults.
func (p *OrdersStackProps) SetDefaults() {
	if p.EventSource == "" {
		p.EventSource = appenv.EventSource // the example's own source
	}
	if p.AuthMode == "" {
		p.AuthMode = AuthIAM
	}
	if p.NotificationsTTLAttribute == "" {
		p.NotificationsTTLAttribute = notifier.TTLAttribute
	}
	if p.FulfilmentProviderURL == "" {
		p.FulfilmentProviderURL = DefaultFulfilmentProviderURL
	}
	if p.NotificationRetention == 0 {
		p.NotificationRetention = appenv.DefaultNotificationRetention
	}
	if p.ConsumerMaxEventAge == 0 {
		p.ConsumerMaxEventAge = DefaultConsumerMaxEventAge
	}
	if p.ConsumerRetryAttempts == 0 {
		p.ConsumerRetryAttempts = DefaultConsumerRetryAttempts
	}
	if p.ThrottleRate == 0 {
		p.ThrottleRate = DefaultThrottleRate
	}
	if p.ThrottleBurst == 0 {
		p.ThrottleBurst = DefaultThrottleBurst
	}
	if p.LogRetention == "" {
		p.LogRetention = awslogs.RetentionDays_ONE_MONTH
	}
	if p.AccessLogRetention == "" {
		p.AccessLogRetention = p.LogRetention
	}
	if p.API4xxRatePercent == 0 {
		p.API4xxRatePercent = DefaultAPI4xxRatePercent
	}
	if p.API5xxRatePercent == 0 {
		p.API5xxRatePercent = DefaultAPI5xxRatePercent
	}
	reserved := make(map[string]int, len(functionNames))
	for _, fn := range functionNames {
		reserved[fn] = NoReservedConcurrency
	}
	if n := p.ReservedConcurrency[AllFunctions]; n != 0 {
		for _, fn := range functionNames {
			reserved[fn] = n
		}
	}
	for fn, n := range p.ReservedConcurrency {
		if n != 0 && fn != AllFunctions {
			reserved[fn] = n
		}
	}
	p.ReservedConcurrency = reserved
	if p.StackName == "" {
		p.StackName = DefaultStackName
	}
}

// removalPolicy is the policy for stateful resources.
func (p *OrdersStackProps) removalPolicy() awscdk.RemovalPolicy {
	if p.Destroy {
		return awscdk.RemovalPolicy_DESTROY
	}
	return awscdk.RemovalPolicy_RETAIN
}

// Validate applies the defaults to a copy of p and checks it (the Outbox
// props are checked by outboxcdk.New). It returns nil or an error wrapping
// ErrInvalidProps that lists every problem. It calls nothing in the CDK.
func (p OrdersStackProps) Validate() error {
	p.SetDefaults()
	var errs []error
	if p.AssetRoot == "" {
		errs = append(errs, errors.New("AssetRoot is required"))
	}
	if p.AuthMode != AuthIAM && p.AuthMode != AuthNone {
		errs = append(errs, fmt.Errorf("AuthMode %q is not %q or %q", p.AuthMode, AuthIAM, AuthNone))
	}
	if p.ConsumerMaxEventAge < MinConsumerMaxEventAge || p.ConsumerMaxEventAge > MaxConsumerMaxEventAge || p.ConsumerMaxEventAge%time.Second != 0 {
		errs = append(errs, fmt.Errorf("ConsumerMaxEventAge %s must be whole seconds in %s..%s", p.ConsumerMaxEventAge, MinConsumerMaxEventAge, MaxConsumerMaxEventAge))
	}
	if p.ConsumerRetryAttempts < minConsumerRetryAttempts || p.ConsumerRetryAttempts > MaxConsumerRetryAttempts {
		errs = append(errs, fmt.Errorf("ConsumerRetryAttempts %d is outside %d..%d", p.ConsumerRetryAttempts, minConsumerRetryAttempts, MaxConsumerRetryAttempts))
	}
	if p.ThrottleRate < 1 || p.ThrottleBurst < 1 {
		errs = append(errs, fmt.Errorf("ThrottleRate %d and ThrottleBurst %d must be positive", p.ThrottleRate, p.ThrottleBurst))
	}
	if p.NotificationsTTLAttribute != dedup.TTLAttribute {
		// the notifications table also holds the notifier's dedup markers,
		// which the notifier writes with dedup.TTLAttribute
		errs = append(errs, fmt.Errorf("NotificationsTTLAttribute %q must be %q: the notifications table also holds the notifier's dedup markers, which expire by it",
			p.NotificationsTTLAttribute, dedup.TTLAttribute))
	}
	if p.AuthMode == AuthNone && p.StackName == DefaultStackName {
		errs = append(errs, fmt.Errorf("AuthMode %s needs an explicit stack name other than %q (an open API must not replace the default stack)", AuthNone, DefaultStackName))
	}
	keys := map[string]bool{}
	for _, r := range Routes {
		keys[r.Key()] = true
	}
	for k, th := range p.RouteThrottles {
		if !keys[k] {
			errs = append(errs, fmt.Errorf("RouteThrottles: %q is not a route key (%v)", k, slices.Sorted(maps.Keys(keys))))
		}
		if th.RateLimit < 1 || th.BurstLimit < 1 {
			errs = append(errs, fmt.Errorf("RouteThrottles[%q]: rate %d and burst %d must be positive", k, th.RateLimit, th.BurstLimit))
		}
	}
	if err := p.ConsumerScaling.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ConsumerScaling: %w", err))
	}
	peak := p.ConsumerScaling.PeakConcurrency()
	for fn, n := range p.ReservedConcurrency {
		consumer := slices.Contains(consumerNames, fn)
		switch {
		case !slices.Contains(functionNames, fn):
			errs = append(errs, fmt.Errorf("ReservedConcurrency: unknown function %q (%v or %q)", fn, functionNames, AllFunctions))
		case fn == outboxcdk.ReconcilerFunction && n != outboxcdk.ReconcilerReservedConcurrency && n != NoReservedConcurrency:
			errs = append(errs, fmt.Errorf("ReservedConcurrency: the reconciler runs one at a time (%d) or unreserved (%d), not %d", outboxcdk.ReconcilerReservedConcurrency, NoReservedConcurrency, n))
		case n == NoReservedConcurrency:
		case n < 1 || n > maxReservedConcurrency:
			errs = append(errs, fmt.Errorf("ReservedConcurrency[%s] %d is outside 1..%d (or %d for none)", fn, n, maxReservedConcurrency, NoReservedConcurrency))
		case consumer && n < peak:
			errs = append(errs, fmt.Errorf("ReservedConcurrency[%s] %d is below its SQS event source mapping's peak concurrency %d (Lambda would throttle the mapping, and a throttled message counts toward maxReceiveCount)", fn, n, peak))
		}
	}
	errs = append(errs, p.preflight()...)
	if a := p.AlarmTopicArn; a != "" {
		if err := outboxcdk.ValidAlarmTopicArn(a); err != nil {
			errs = append(errs, fmt.Errorf("AlarmTopicArn: %w", err))
		}
	}
	for name, v := range map[string]float64{"API4xxRatePercent": p.API4xxRatePercent, "API5xxRatePercent": p.API5xxRatePercent} {
		if v <= 0 || v > 100 {
			errs = append(errs, fmt.Errorf("%s %v is outside (0, 100]", name, v))
		}
	}
	for _, a := range slices.Concat(p.PublisherArns, p.RedriveRoleArns, p.ReplayRoleArns) {
		if !strings.HasPrefix(a, "arn:") || strings.ContainsAny(a, "*?") {
			errs = append(errs, fmt.Errorf("principal ARN %q must be an exact ARN (no wildcards)", a))
		}
	}
	errs = append(errs, p.validReplayRoles()...)
	if err := validProviderURL(p.FulfilmentProviderURL); err != nil {
		errs = append(errs, err)
	}
	if a := p.FulfilmentProviderSecretArn; a != "" && !secretCompleteArn.MatchString(a) {
		errs = append(errs, fmt.Errorf("FulfilmentProviderSecretArn %q is not a complete Secrets Manager secret ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>)", a))
	}
	errs = append(errs, p.validMultiRegion()...)
	if p.EncryptionKey != nil && p.CustomerManagedKey {
		errs = append(errs, errors.New("set EncryptionKey or CustomerManagedKey, not both"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidProps, errors.Join(errs...))
}
