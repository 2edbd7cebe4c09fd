package outboxcdk

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/customresources"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/deadletter"
	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Function names: the relay's and reconciler's assets are
// <AssetRoot>/<name>/bootstrap (functions/<name> compiled by `make build`).
const (
	RelayFunction      = "relay"
	ReconcilerFunction = "reconciler"
)

// IAM actions granted by the construct. Each list is exactly what the
// runtime calls; no wildcards.
var (
	// WriteEventsActions lets a writer put outbox records inside its
	// TransactWriteItems call (a transaction is authorized per action:
	// dynamodb:PutItem for each Put).
	WriteEventsActions = []string{"dynamodb:PutItem"}
	// AggregateUpdateActions is what outbox.Writer.Update calls on the
	// aggregate's own table: GetItem (the consistent read of the version),
	// PutItem (a Change with an Item) and UpdateItem (a Change without one:
	// only the version moves). Grant it on your table beside
	// GrantWriteEvents (GrantAggregateUpdate does both); writes to other
	// tables in Change.Writes need their own actions.
	AggregateUpdateActions = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
	// MarkActions lets the relay and the reconciler mark records published
	// or parked (UpdateItem, or PartiQL UPDATE via BatchExecuteStatement).
	MarkActions = []string{"dynamodb:UpdateItem", "dynamodb:PartiQLUpdate"}
	// PendingQueryActions lets the reconciler query the pending index.
	PendingQueryActions = []string{"dynamodb:Query"}
	// PublishActions lets the relay and the reconciler publish to the bus.
	PublishActions = []string{"events:PutEvents"}
	// ParkActions lets the relay and the reconciler park a record on the
	// parked-records queue.
	ParkActions = []string{"sqs:SendMessage"}
)

// ReconcilerAsyncRetryAttempts is how often Lambda retries a failed
// scheduled reconciler run (asynchronous invocation, 0..2; Lambda's default
// 2) before sending it to ReconcilerFailureQueue.
const ReconcilerAsyncRetryAttempts = 2

// Outbox is the reusable transactional-outbox construct: the outbox table
// (with stream, TTL and the sparse pending index), the relay function fed by
// a DynamoDB Streams event source mapping, the scheduled reconciler, the
// parked-records DLQ, the mapping's and the reconciler's on-failure queues,
// and the alarms.
//
// Drop it into a stack, pass an event bus, and call GrantWriteEvents on every
// function that appends outbox records:
//
//	ob, err := outboxcdk.New(stack, "Outbox", outboxcdk.Props{EventBus: bus, AssetRoot: dist})
//	ob.GrantWriteEvents(apiFn)
type Outbox struct {
	constructs.Construct

	// Table is the outbox table: pk (S) + sk (S), stream NEW_IMAGE, TTL on
	// outbox.TTLAttribute, sparse GSI outbox.PendingIndexName, PITR,
	// encrypted with the AWS managed key or Props.EncryptionKey. Nil in
	// multi-Region mode (GlobalTable); OutboxTable returns either.
	Table awsdynamodb.Table
	// GlobalTable is the outbox table in multi-Region mode (nil otherwise):
	// in MultiRegionProps.PrimaryRegion a TableV2 with the same keys, index,
	// stream, TTL, PITR and encryption as Table and a replica in every
	// other Region; elsewhere this Region's replica, imported by name with
	// its exact stream ARN (ReplicaStream).
	GlobalTable awsdynamodb.ITableV2
	// ReplicaStream is the custom resource that reads this Region's
	// replica's stream ARN (DescribeTable, ReplicaStreamArnPath) in a
	// multi-Region outbox's non-primary Regions; nil otherwise.
	ReplicaStream customresources.AwsCustomResource
	// ReplicationAlarms are the ReplicationLatency alarms from this Region
	// to each other Region (multi-Region mode; also in Alarms).
	ReplicationAlarms []awscloudwatch.Alarm
	// Relay publishes outbox records from the table's stream.
	Relay awslambda.Function
	// StreamSource is the relay's DynamoDB Streams event source mapping.
	StreamSource awslambdaeventsources.DynamoEventSource
	// Reconciler re-publishes pending records older than ReconcileAfter.
	Reconciler awslambda.Function
	// ReconcileSchedule is the EventBridge rule that runs the reconciler.
	ReconcileSchedule awsevents.Rule
	// ScheduleDLQ is ReconcileSchedule's target DLQ: a scheduled run
	// EventBridge could not hand to Lambda (a missing permission, a
	// throttled invoke) after the target's retries. SSE-SQS whatever
	// EncryptionKey: it receives the schedule event only.
	ScheduleDLQ *deadletter.Queue
	// ParkedQueue receives parked (unpublishable) outbox records with their
	// full envelope; its URL is the relay's and reconciler's
	// config.EnvParkedQueueURL.
	ParkedQueue *deadletter.Queue
	// StreamFailureQueue is the mapping's on-failure destination: it gets
	// batch metadata (shard, sequence numbers) after retries are exhausted.
	StreamFailureQueue *deadletter.Queue
	// ReconcilerFailureQueue is the on-failure destination of the
	// reconciler's asynchronous invocations by ReconcileSchedule: a run that
	// failed ReconcilerAsyncRetryAttempts + 1 times is recorded there (the
	// schedule event wrapped with requestContext.condition and the error)
	// instead of being discarded (Lambda developer guide,
	// invocation-async-retain-records). Pending records are not lost either
	// way: the next scheduled run sweeps them.
	ReconcilerFailureQueue *deadletter.Queue
	// Archive keeps every event the outbox publishes (pattern
	// {"source":[EventSource]}) for Props.ArchiveRetentionDays, for audit
	// and to backfill a new or rebuilt consumer (GrantReplay, outboxctl
	// backfill); nil with NoArchive.
	Archive awsevents.Archive
	// Alarms lists every alarm the construct created, DLQ alarms included.
	Alarms []awscloudwatch.Alarm
	// AlarmTopic is the SNS topic every alarm under the construct notifies
	// on ALARM and OK (NotifyAlarms): Props.AlarmTopic, or a topic the
	// construct created (NewAlarmTopic, encrypted with Props.EncryptionKey
	// when set).
	AlarmTopic awssns.ITopic

	props  Props
	region string // multi-Region mode: the stack's Region; "" otherwise
}

// New creates an Outbox with id under scope. It returns an error wrapping
// ErrInvalidProps when props do not validate, and an error wrapping
// gofunc.ErrMissingBootstrap when a function's bootstrap is missing from
// AssetRoot. In multi-Region mode (Props.MultiRegion) scope's stack must
// have a concrete Region, one of MultiRegionProps.Regions (an error wrapping
// ErrInvalidProps otherwise).
func New(scope constructs.Construct, id string, props Props) (*Outbox, error) {
	if err := props.Validate(); err != nil {
		return nil, err
	}
	props.SetDefaults()
	region := ""
	if props.MultiRegion != nil {
		var err error
		if region, err = props.MultiRegion.stackRegion(scope); err != nil {
			return nil, err
		}
	}
	c := constructs.NewConstruct(scope, jsii.String(id))
	o := &Outbox{Construct: c, props: props, region: region}
	if props.MultiRegion != nil {
		o.newGlobalTable()
	} else {
		o.newTable()
	}

	return o.build()
}

// newTable creates the single-Region outbox table (Table).
func (o *Outbox) newTable() {
	c, props := o.Construct, o.props
	encryption := awsdynamodb.TableEncryption_AWS_MANAGED
	if props.EncryptionKey != nil {
		encryption = awsdynamodb.TableEncryption_CUSTOMER_MANAGED
	}
	o.Table = awsdynamodb.NewTable(c, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrPK), Type: awsdynamodb.AttributeType_STRING},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrSK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		Stream:              awsdynamodb.StreamViewType_NEW_IMAGE,
		TimeToLiveAttribute: jsii.String(outbox.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:    encryption,
		EncryptionKey: props.EncryptionKey,
		// a retained table is also protected against deletion by API
		// calls; a throw-away (DESTROY) one is not
		DeletionProtection: jsii.Bool(props.RemovalPolicy != awscdk.RemovalPolicy_DESTROY),
		RemovalPolicy:      props.RemovalPolicy,
	})
	o.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:      jsii.String(outbox.PendingIndexName),
		PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrPendingShard), Type: awsdynamodb.AttributeType_STRING},
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrCreatedAt), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_ALL,
	})
}

// build creates everything but the table.
func (o *Outbox) build() (*Outbox, error) {
	c, props := o.Construct, o.props
	o.ParkedQueue = deadletter.New(c, "ParkedQueue", "parked outbox records", props.RemovalPolicy, props.EncryptionKey)
	// The two on-failure queues stay SSE-SQS even with an EncryptionKey:
	// they receive metadata only (shard and sequence numbers, the schedule
	// event), never a record's contents, and the CDK's on-failure
	// destinations would grant wildcard KMS actions (kms:GenerateDataKey*,
	// kms:ReEncrypt*) on a customer managed key.
	o.StreamFailureQueue = deadletter.New(c, "StreamFailureQueue", "outbox stream batches the relay could not process", props.RemovalPolicy, nil)
	o.ReconcilerFailureQueue = deadletter.New(c, "ReconcilerFailureQueue", "scheduled reconciler runs that failed after Lambda's asynchronous retries", props.RemovalPolicy, nil)
	// The schedule's target DLQ holds the schedule event only: SSE-SQS,
	// like the on-failure queues.
	o.ScheduleDLQ = deadletter.New(c, "ScheduleDLQ", "scheduled reconciler runs EventBridge could not invoke", props.RemovalPolicy, nil)

	publishEnv := map[string]string{
		config.EnvEventBusName:              *props.EventBus.EventBusName(),
		config.EnvParkedQueueURL:            *o.ParkedQueue.Queue.QueueUrl(),
		config.EnvPublishedRetentionSeconds: seconds(props.PublishedRetention),
	}
	var err error
	o.Relay, err = gofunc.New(c, "Relay", gofunc.Props{
		AssetDir:      filepath.Join(props.AssetRoot, RelayFunction),
		Description:   "Outbox relay: publishes outbox records from the table stream to EventBridge, then marks them published.",
		Environment:   publishEnv,
		Timeout:       props.RelayTimeout,
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.RemovalPolicy,
		// the log group and the environment (gofunc.AllowLogsToUseKey)
		EncryptionKey:     props.EncryptionKey,
		TelemetryLayerArn: props.TelemetryLayerArn,
	})
	if err != nil {
		return nil, err
	}
	reconcileEnv := map[string]string{
		config.EnvReconcileAfterSeconds:  seconds(props.ReconcileAfter),
		config.EnvReconcileBudgetSeconds: seconds(props.ReconcileBudget),
	}
	for k, v := range publishEnv {
		reconcileEnv[k] = v
	}
	o.Reconciler, err = gofunc.New(c, "Reconciler", gofunc.Props{
		AssetDir:      filepath.Join(props.AssetRoot, ReconcilerFunction),
		Description:   "Outbox reconciler: re-publishes pending outbox records the relay missed.",
		Environment:   reconcileEnv,
		Timeout:       props.ReconcileBudget + 15*time.Second,
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.RemovalPolicy,
		// one sweep at a time (Props.ReconcilerReservedConcurrency); without
		// a reservation overlapping runs are safe, each record is claimed
		// before it is re-sent
		ReservedConcurrency: max(props.ReconcilerReservedConcurrency, 0),
		EncryptionKey:       props.EncryptionKey,
		TelemetryLayerArn:   props.TelemetryLayerArn,
	})
	if err != nil {
		return nil, err
	}
	for _, fn := range []awslambda.Function{o.Relay, o.Reconciler} {
		o.setOutboxEnv(fn)
		grant(fn, MarkActions, o.OutboxTable().TableArn())
		grant(fn, PublishActions, props.EventBus.EventBusArn())
		grant(fn, ParkActions, o.ParkedQueue.Queue.QueueArn())
		o.grantKey(fn)
	}
	grant(o.Reconciler, PendingQueryActions, o.PendingIndexArn())
	if props.MultiRegion != nil {
		grant(o.Reconciler, TakeoverSweepActions, o.OutboxTable().TableArn())
	}

	// StreamFilterPatternIn("") is StreamFilterPattern(): single-Region
	// mode's filter is unchanged
	filter := outbox.StreamFilterPatternIn(o.region)
	o.StreamSource = awslambdaeventsources.NewDynamoEventSource(o.OutboxTable(), &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition:        awslambda.StartingPosition_TRIM_HORIZON,
		BatchSize:               jsii.Number(props.BatchSize),
		MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(props.MaxBatchingWindow.Seconds())),
		BisectBatchOnError:      jsii.Bool(true),
		ReportBatchItemFailures: jsii.Bool(true),
		RetryAttempts:           jsii.Number(props.RetryAttempts),
		MaxRecordAge:            awscdk.Duration_Seconds(jsii.Number(props.MaxRecordAge.Seconds())),
		ParallelizationFactor:   jsii.Number(props.ParallelizationFactor),
		OnFailure:               awslambdaeventsources.NewSqsDlq(o.StreamFailureQueue.Queue),
		Filters:                 &[]*map[string]any{awslambda.FilterCriteria_Filter(&filter)},
	})
	o.Relay.AddEventSource(o.StreamSource)
	if props.MultiRegion != nil {
		// TableV2's stream grant names dynamodb:ListStreams on the stream
		// ARN, where it grants nothing (the action supports no
		// resource-level permissions): the mapping needs it on "*", as
		// DynamoEventSource grants it for a Table.
		grant(o.Relay, []string{"dynamodb:ListStreams"}, jsii.String("*"))
	}
	// DynamoEventSource grants dynamodb:ListStreams on "*" (the action has no
	// resource-level permissions); the stream-scoped actions are on the
	// stream ARN.
	cdknag.NagSuppressions_AddResourceSuppressions(o.Relay.Role(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("dynamodb:ListStreams, required by the Lambda DynamoDB Streams event source mapping, " +
			"supports no resource-level permissions, so its resource is *. All other actions are scoped to ARNs."),
		AppliesTo: &[]any{jsii.String("Resource::*")},
	}}, jsii.Bool(true))

	rate := awscdk.Duration_Minutes(jsii.Number(props.ReconcileRate.Minutes()))
	maxAge := min(props.ReconcileRate, 24*time.Hour)
	// The schedule invokes the reconciler asynchronously: a failing run is
	// retried by Lambda, then sent to the on-failure destination (never
	// discarded). Asynchronous event age is at most 6 h.
	o.Reconciler.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		OnFailure:     awslambdadestinations.NewSqsDestination(o.ReconcilerFailureQueue.Queue),
		RetryAttempts: jsii.Number(ReconcilerAsyncRetryAttempts),
		MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(max(min(props.ReconcileRate, 6*time.Hour), time.Minute).Seconds())),
	})
	o.ReconcileSchedule = awsevents.NewRule(c, jsii.String("ReconcileSchedule"), &awsevents.RuleProps{
		Description: jsii.String("Runs the outbox reconciler."),
		Schedule:    awsevents.Schedule_Rate(rate),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(o.Reconciler, &awseventstargets.LambdaFunctionProps{
			RetryAttempts:   jsii.Number(2),
			MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(maxAge.Seconds())),
			DeadLetterQueue: o.ScheduleDLQ.Queue,
		})},
	})
	o.restrictDLQSenders()
	o.addArchive()

	o.AlarmTopic = props.AlarmTopic
	if o.AlarmTopic == nil {
		o.AlarmTopic = NewAlarmTopic(c, "AlarmTopic", props.EncryptionKey)
	}
	o.addAlarms()
	if props.MultiRegion != nil {
		o.replicationAlarms()
	}
	NotifyAlarms(c, o.AlarmTopic)
	return o, nil
}

// Props returns the construct's effective props (defaults applied).
func (o *Outbox) Props() Props { return o.props }

// OutboxTable returns the outbox table: Table in single-Region mode,
// GlobalTable in multi-Region mode.
func (o *Outbox) OutboxTable() awsdynamodb.ITable {
	if o.GlobalTable != nil {
		return o.GlobalTable
	}
	return o.Table
}

// PendingIndexArn returns the ARN of the pending index (a token).
func (o *Outbox) PendingIndexArn() *string {
	return jsii.String(*o.OutboxTable().TableArn() + "/index/" + outbox.PendingIndexName)
}

// GrantWriteEvents lets fn append outbox records in its transactions: it
// grants exactly WriteEventsActions on the outbox table (plus
// KeyUseActions on Props.EncryptionKey when one is set) and sets
// config.EnvOutboxTable, config.EnvPendingShards, config.EnvEventSource and
// config.EnvMaxEntryBytes on fn. In multi-Region mode it also grants
// HomeCheckActions on the outbox table (the home item's check and read)
// and sets config.EnvRegions.
func (o *Outbox) GrantWriteEvents(fn awslambda.Function) {
	o.setOutboxEnv(fn)
	grant(fn, WriteEventsActions, o.OutboxTable().TableArn())
	if o.props.MultiRegion != nil {
		grant(fn, HomeCheckActions, o.OutboxTable().TableArn())
	}
	o.grantKey(fn)
}

// GrantAggregateUpdate lets fn run outbox.Writer.Update on aggregates kept
// in table: GrantWriteEvents (the outbox records and the writer's
// environment) plus exactly AggregateUpdateActions on table (and the
// outbox's key, when the outbox is encrypted with one; a table encrypted
// with another key needs that key's grant too).
func (o *Outbox) GrantAggregateUpdate(fn awslambda.Function, table awsdynamodb.ITable) {
	o.GrantWriteEvents(fn)
	grant(fn, AggregateUpdateActions, table.TableArn())
}

// setOutboxEnv sets the variables every outbox writer, the relay and the
// reconciler share: in multi-Region mode config.EnvRegions too (Lambda sets
// config.EnvAWSRegion itself).
func (o *Outbox) setOutboxEnv(fn awslambda.Function) {
	env := map[string]string{
		config.EnvOutboxTable:   *o.OutboxTable().TableName(),
		config.EnvPendingShards: strconv.Itoa(o.props.PendingShards),
		config.EnvEventSource:   o.props.EventSource,
		config.EnvMaxEntryBytes: strconv.Itoa(o.props.MaxEntryBytes),
	}
	if m := o.props.MultiRegion; m != nil {
		env[config.EnvRegions] = strings.Join(m.Regions, ",")
	}
	for k, v := range env {
		fn.AddEnvironment(jsii.String(k), jsii.String(v), nil)
	}
}

func (o *Outbox) grantKey(fn awslambda.Function) { o.grantKeyTo(fn) }

func (o *Outbox) grantKeyTo(g awsiam.IGrantable) {
	if o.props.EncryptionKey != nil {
		o.props.EncryptionKey.Grant(g, *jsii.Strings(KeyUseActions...)...)
	}
}

// grant adds one IAM statement with actions on arns to g's policy.
func grant(g awsiam.IGrantable, actions []string, arns ...*string) {
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      g,
		Actions:      jsii.Strings(actions...),
		ResourceArns: &arns,
	})
}

// seconds formats d as whole seconds.
func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// OldestPendingAgeMetric is the reconciler's oldest-pending-record age in
// seconds (maximum over five minutes), emitted via EMF as
// config.MetricNamespace/config.MetricOldestPendingAge with dimension
// config.MetricDimensionOutboxTable = the outbox table name.
func (o *Outbox) OldestPendingAgeMetric() awscloudwatch.Metric {
	return o.customMetric(config.MetricOldestPendingAge, "Maximum")
}

// ReconcilerResentMetric is the number of records the reconciler re-sent
// (sum over five minutes); anything above 0 means the relay missed records.
func (o *Outbox) ReconcilerResentMetric() awscloudwatch.Metric {
	return o.customMetric(config.MetricReconcilerResent, "Sum")
}

// PendingCountMetric is the number of pending records the reconciler saw.
func (o *Outbox) PendingCountMetric() awscloudwatch.Metric {
	return o.customMetric(config.MetricPendingCount, "Maximum")
}

// ParkedMetric is the number of records parked by the relay or reconciler.
func (o *Outbox) ParkedMetric() awscloudwatch.Metric {
	return o.customMetric(config.MetricParked, "Sum")
}

func (o *Outbox) customMetric(name, stat string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(config.MetricNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{config.MetricDimensionOutboxTable: o.OutboxTable().TableName()},
		Statistic:     jsii.String(stat),
		Period:        awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

// IteratorAgeMetric is the relay's stream IteratorAge in milliseconds
// (maximum over one minute): how far behind the stream the relay is.
func (o *Outbox) IteratorAgeMetric() awscloudwatch.Metric {
	return o.Relay.Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{
		Statistic: jsii.String("Maximum"),
		Period:    awscdk.Duration_Minutes(jsii.Number(1)),
	})
}

func (o *Outbox) addAlarms() {
	five := awscdk.Duration_Minutes(jsii.Number(5))
	sum := &awscloudwatch.MetricOptions{Period: five, Statistic: jsii.String("Sum")}
	alarm := func(id, desc string, m awscloudwatch.IMetric, threshold float64, cmp awscloudwatch.ComparisonOperator, periods float64) {
		a := awscloudwatch.NewAlarm(o.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             m,
			Threshold:          jsii.Number(threshold),
			ComparisonOperator: cmp,
			EvaluationPeriods:  jsii.Number(periods),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		o.Alarms = append(o.Alarms, a)
	}
	alarm("RelayErrorsAlarm", "Outbox relay invocations failed (the event source mapping retries the batch).",
		o.Relay.MetricErrors(sum), 1, awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1)
	alarm("IteratorAgeAlarm", fmt.Sprintf("Outbox relay is more than %s behind the table stream (records expire after 24 h).", o.props.IteratorAgeThreshold),
		o.IteratorAgeMetric(), float64(o.props.IteratorAgeThreshold.Milliseconds()), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 5)
	alarm("OldestPendingAgeAlarm", fmt.Sprintf("An outbox record has been pending (unpublished) for more than %s.", o.props.OldestPendingThreshold),
		o.OldestPendingAgeMetric(), o.props.OldestPendingThreshold.Seconds(), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1)
	alarm("ReconcilerResentAlarm", "The reconciler re-sent outbox records the relay had not published.",
		o.ReconcilerResentMetric(), 0, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1)
	alarm("ReconcilerErrorsAlarm", "Outbox reconciler runs failed.",
		o.Reconciler.MetricErrors(sum), 1, awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1)
	o.Alarms = append(o.Alarms, o.ParkedQueue.Alarm, o.StreamFailureQueue.Alarm, o.ReconcilerFailureQueue.Alarm, o.ScheduleDLQ.Alarm)
	o.Alarms = append(o.Alarms, RuleDeliveryAlarms(o.Construct, "ReconcileSchedule", o.ReconcileSchedule, nil, "the reconciler's schedule")...)
}

// restrictDLQSenders lets each of the construct's dead-letter queues accept
// messages from its own source only (deadletter.Queue.AcceptOnlyFrom), and
// no SQS queue name any of them as its dead-letter queue: the parked-records
// queue from the relay's and the reconciler's roles (their code parks
// records), the stream on-failure queue from the relay's role (Lambda sends
// an event source mapping's on-failure record with the function's execution
// role), the reconciler's on-failure queue from the reconciler's role (so
// does an asynchronous invocation's on-failure destination), the schedule's
// DLQ from the schedule rule (aws:SourceArn); and each refuses
// sqs:DeleteMessage and sqs:PurgeQueue to all but
// Props.DeadLetterOperatorArns (deadletter.Queue.KeepMessagesFromAllBut).
func (o *Outbox) restrictDLQSenders() {
	relay, reconciler := o.Relay.Role().RoleArn(), o.Reconciler.Role().RoleArn()
	o.ParkedQueue.AcceptOnlyFrom(deadletter.Senders{PrincipalArns: []*string{relay, reconciler}})
	o.StreamFailureQueue.AcceptOnlyFrom(deadletter.Senders{PrincipalArns: []*string{relay}})
	o.ReconcilerFailureQueue.AcceptOnlyFrom(deadletter.Senders{PrincipalArns: []*string{reconciler}})
	o.ScheduleDLQ.AcceptOnlyFrom(deadletter.Senders{SourceArns: []*string{o.ReconcileSchedule.RuleArn()}})
	operators := make([]*string, len(o.props.DeadLetterOperatorArns))
	for i, a := range o.props.DeadLetterOperatorArns {
		operators[i] = jsii.String(a)
	}
	for _, q := range []*deadletter.Queue{o.ParkedQueue, o.StreamFailureQueue, o.ReconcilerFailureQueue, o.ScheduleDLQ} {
		q.RefuseRedriveSources()
		q.KeepMessagesFromAllBut(operators)
	}
}

// Widgets returns CloudWatch dashboard widgets for the outbox signals: relay
// invocations and errors, iterator age, oldest pending age, pending count,
// re-sent and parked records, and the two queues' depth.
func (o *Outbox) Widgets() []awscloudwatch.IWidget {
	five := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}
	graph := func(title string, metrics ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title),
			Left:  &metrics,
			Width: jsii.Number(8),
		})
	}
	return []awscloudwatch.IWidget{
		graph("Relay invocations / errors", o.Relay.MetricInvocations(five), o.Relay.MetricErrors(five)),
		graph("Relay iterator age (ms)", o.IteratorAgeMetric()),
		graph("Oldest pending record age (s)", o.OldestPendingAgeMetric()),
		graph("Pending records", o.PendingCountMetric()),
		graph("Reconciler re-sent / parked records", o.ReconcilerResentMetric(), o.ParkedMetric()),
		graph("Reconciler invocations / errors", o.Reconciler.MetricInvocations(five), o.Reconciler.MetricErrors(five)),
		graph("Outbox DLQ depth",
			o.ParkedQueue.Queue.MetricApproximateNumberOfMessagesVisible(nil),
			o.StreamFailureQueue.Queue.MetricApproximateNumberOfMessagesVisible(nil),
			o.ReconcilerFailureQueue.Queue.MetricApproximateNumberOfMessagesVisible(nil)),
	}
}
