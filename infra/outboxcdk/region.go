package outboxcdk

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/customresources"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Multi-Region mode (issue 34, docs/MULTI-REGION.md). One Outbox per Region,
// each in a stack of a concrete Region: the primary Region's stack creates
// the outbox table as a DynamoDB global table (TableV2, version 2019.11.21,
// multi-Region eventual consistency) with a replica in every other Region;
// every other Region's stack imports its replica by name. Each Region has
// its own relay, reconciler, queues and alarms, and publishes only the
// records written in it (outbox.StreamFilterPatternIn).

// IAM actions of multi-Region mode, granted only when Props.MultiRegion is
// set (single-Region grants are unchanged).
var (
	// HomeCheckActions are what a writer needs on the outbox table besides
	// WriteEventsActions in multi-Region mode: dynamodb:ConditionCheckItem
	// (every transaction after an aggregate's first checks that its home
	// item names this Region, outbox.HomeKey) and dynamodb:GetItem (reading
	// the home item to name the home Region in outbox.NotHomeError).
	HomeCheckActions = []string{"dynamodb:ConditionCheckItem", "dynamodb:GetItem"}
	// TakeoverSweepActions are what the reconciler needs on the outbox
	// table besides MarkActions and PendingQueryActions in multi-Region
	// mode: dynamodb:BatchGetItem (the survivors' takeover marks of its
	// pending records), dynamodb:Query (the takeover items),
	// dynamodb:GetItem (a failed Region's record, re-read consistently
	// before the survivor publishes it), dynamodb:PutItem and
	// dynamodb:UpdateItem (its heartbeat and its takeover marks). The
	// takeover items live in the outbox table itself.
	TakeoverSweepActions = []string{"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"}
	// TakeoverActions are what the operator's takeover commands (outboxctl
	// takeover / release / takeovers) need on the outbox table: write, read
	// and list the takeover items and read the heartbeats (GrantTakeover).
	// Nothing deletes a takeover item (release marks it RELEASED).
	TakeoverActions = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"}
	// DescribeTableActions is what the custom resource that reads a
	// replica's stream ARN calls (in its own Region, on the table's ARN).
	DescribeTableActions = []string{"dynamodb:DescribeTable"}
)

// Replication alarm settings.
const (
	// DynamoDBNamespace is the CloudWatch namespace of DynamoDB's metrics.
	DynamoDBNamespace = "AWS/DynamoDB"
	// MetricReplicationLatency is the time, in milliseconds, an update
	// written in the source Region takes to appear in the receiving
	// Region's replica (dimensions DimensionTableName and
	// DimensionReceivingRegion), stored in the source Region (DynamoDB
	// developer guide, Monitoring global tables; "There is no SLA on this
	// latency").
	MetricReplicationLatency = "ReplicationLatency"
	DimensionTableName       = "TableName"
	DimensionReceivingRegion = "ReceivingRegion"
	// DefaultReplicationLatencyThreshold is the default of
	// MultiRegionProps.ReplicationLatencyThreshold: 1 min, far above the
	// usual second and below the reconciler's default ReconcileAfter
	// (5 min), so a lag that could make a takeover sweep miss records is
	// seen first.
	DefaultReplicationLatencyThreshold = time.Minute
	// ReplicationLatencyPeriods is how many consecutive 1-minute periods
	// the latency (maximum) must exceed the threshold to alarm.
	ReplicationLatencyPeriods = 5
)

// MultiRegionProps turns an Outbox into one Region's part of a multi-Region
// outbox (Props.MultiRegion). Every Region's stack gets the same values.
type MultiRegionProps struct {
	// Regions are the Regions of the global table, two or more
	// (config.ParseRegions' rules), the stack's own among them. The
	// construct sets them, comma-joined, as config.EnvRegions on the
	// relay, the reconciler and every GrantWriteEvents writer. Their order
	// matters and must be the same in every Region's stack: the first is
	// the legacy owner (reconciler.Config.LegacyOwner), which publishes the
	// records written before the table went multi-Region — list the
	// existing table's Region first.
	Regions []string
	// PrimaryRegion is the Region whose stack creates the global table:
	// the first of Regions (the legacy owner; Validate refuses another),
	// the existing table's Region. Its stack must be deployed first: the other
	// Regions' stacks import their replica, which exists once the primary
	// stack has created it.
	PrimaryRegion string
	// TableName is the global table's physical name, the same in every
	// Region (the other stacks import the table by it): 3..255 characters
	// of a-z, A-Z, 0-9, '_', '-', '.' (DynamoDB naming rules). Required.
	TableName string
	// ReplicaKeyArns maps each Region other than PrimaryRegion to the ARN
	// of the customer managed KMS key that encrypts its replica, required
	// for every such Region when Props.EncryptionKey is set (the primary's
	// key is Props.EncryptionKey; a KMS key is regional). In the other
	// Regions' stacks Props.EncryptionKey must be that Region's key.
	ReplicaKeyArns map[string]string
	// ReplicationLatencyThreshold is the threshold of the
	// ReplicationLatency alarms, whole milliseconds, > 0. Default
	// DefaultReplicationLatencyThreshold.
	ReplicationLatencyThreshold time.Duration
}

// tableNamePattern is DynamoDB's table naming rule.
var tableNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// validate returns MultiRegionProps' problems (without the stack's own
// Region, which New checks), encrypted: whether Props.EncryptionKey is set.
func (m *MultiRegionProps) validate(encrypted bool) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("MultiRegion: "+format, a...)) }
	regions, err := config.ParseRegions(strings.Join(m.Regions, ","))
	switch {
	case err != nil:
		bad("Regions %v: %w", m.Regions, err)
	case !slices.Contains(regions, m.PrimaryRegion):
		bad("PrimaryRegion %q is not one of Regions %v", m.PrimaryRegion, m.Regions)
	case regions[0] != m.PrimaryRegion:
		bad("PrimaryRegion %q is not the first of Regions %v: the first Region is the legacy owner (reconciler.Config.LegacyOwner, which publishes the records written before the table went multi-Region) and must be the existing table's Region, the primary; list %s first", m.PrimaryRegion, m.Regions, m.PrimaryRegion)
	}
	if !tableNamePattern.MatchString(m.TableName) {
		bad("TableName %q is not a DynamoDB table name (3..255 characters of a-z, A-Z, 0-9, '_', '-', '.'); the other Regions import the global table by it", m.TableName)
	}
	if encrypted {
		for _, r := range m.Regions {
			if r != m.PrimaryRegion && m.ReplicaKeyArns[r] == "" {
				bad("EncryptionKey is set but ReplicaKeyArns has no key for replica Region %s (a KMS key is regional)", r)
			}
		}
	}
	for r := range m.ReplicaKeyArns {
		if r == m.PrimaryRegion || !slices.Contains(m.Regions, r) {
			bad("ReplicaKeyArns names %s, which is not a replica Region (Regions other than PrimaryRegion; the primary's key is EncryptionKey)", r)
		}
	}
	if m.ReplicationLatencyThreshold < 0 || m.ReplicationLatencyThreshold%time.Millisecond != 0 {
		bad("ReplicationLatencyThreshold %s must be positive whole milliseconds", m.ReplicationLatencyThreshold)
	}
	return errs
}

// errRegion is returned (wrapped in ErrInvalidProps) when the stack's Region
// cannot be one of the global table's.
var errRegion = errors.New("the stack's Region")

// stackRegion returns the Region of scope's stack in multi-Region mode, or
// an error when it is a token (an environment-agnostic stack) or not one of
// m.Regions.
func (m *MultiRegionProps) stackRegion(scope constructs.Construct) (string, error) {
	r := awscdk.Stack_Of(scope).Region()
	if r == nil || *awscdk.Token_IsUnresolved(r) {
		return "", fmt.Errorf("%w: %w is a token: a multi-Region outbox needs a stack with a concrete Region (StackProps.Env.Region), one of %v", ErrInvalidProps, errRegion, m.Regions)
	}
	if !slices.Contains(m.Regions, *r) {
		return "", fmt.Errorf("%w: %w %s is not one of MultiRegion.Regions %v", ErrInvalidProps, errRegion, *r, m.Regions)
	}
	return *r, nil
}

// newGlobalTable creates (primary Region) or imports (other Regions) the
// outbox table as o.GlobalTable.
func (o *Outbox) newGlobalTable() {
	m, p := o.props.MultiRegion, o.props
	if o.region == m.PrimaryRegion {
		enc := awsdynamodb.TableEncryptionV2_AwsManagedKey()
		if p.EncryptionKey != nil {
			keys := map[string]*string{}
			for r, arn := range m.ReplicaKeyArns {
				keys[r] = jsii.String(arn)
			}
			enc = awsdynamodb.TableEncryptionV2_CustomerManagedKey(p.EncryptionKey, &keys)
		}
		var replicas []*awsdynamodb.ReplicaTableProps
		for _, r := range m.Regions {
			if r != o.region {
				replicas = append(replicas, &awsdynamodb.ReplicaTableProps{Region: jsii.String(r)})
			}
		}
		o.GlobalTable = awsdynamodb.NewTableV2(o.Construct, jsii.String("Table"), &awsdynamodb.TablePropsV2{
			TableName:    jsii.String(m.TableName),
			PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrPK), Type: awsdynamodb.AttributeType_STRING},
			SortKey:      &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrSK), Type: awsdynamodb.AttributeType_STRING},
			Billing:      awsdynamodb.Billing_OnDemand(nil),
			// table-wide: every replica's stream has the same view
			DynamoStream:        awsdynamodb.StreamViewType_NEW_IMAGE,
			TimeToLiveAttribute: jsii.String(outbox.TTLAttribute),
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
			Encryption:         enc,
			DeletionProtection: jsii.Bool(p.RemovalPolicy != awscdk.RemovalPolicy_DESTROY),
			RemovalPolicy:      p.RemovalPolicy,
			GlobalSecondaryIndexes: &[]*awsdynamodb.GlobalSecondaryIndexPropsV2{{
				IndexName:      jsii.String(outbox.PendingIndexName),
				PartitionKey:   &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrPendingShard), Type: awsdynamodb.AttributeType_STRING},
				SortKey:        &awsdynamodb.Attribute{Name: jsii.String(outbox.AttrCreatedAt), Type: awsdynamodb.AttributeType_NUMBER},
				ProjectionType: awsdynamodb.ProjectionType_ALL,
			}},
			Replicas: &replicas,
		})
		return
	}
	// A replica's stream ARN is not a CloudFormation attribute in its own
	// Region (TableV2.replica(r).tableStreamArn is a ".../stream/*"
	// pattern, aws/aws-cdk#31335): DescribeTable in this Region returns
	// the replica's exact LatestStreamArn, which the relay's event source
	// mapping needs. The physical id follows the stream ARN, so a new
	// stream replaces the resource and the mapping with it.
	tableArn := awscdk.Stack_Of(o.Construct).FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("dynamodb"), Resource: jsii.String("table"), ResourceName: jsii.String(m.TableName),
	})
	call := &customresources.AwsSdkCall{
		Service:            jsii.String("DynamoDB"),
		Action:             jsii.String("DescribeTable"),
		Parameters:         map[string]any{"TableName": m.TableName},
		Region:             jsii.String(o.region),
		PhysicalResourceId: customresources.PhysicalResourceId_FromResponse(jsii.String(ReplicaStreamArnPath)),
		OutputPaths:        jsii.Strings(ReplicaStreamArnPath),
	}
	o.ReplicaStream = customresources.NewAwsCustomResource(o.Construct, jsii.String("ReplicaStream"), &customresources.AwsCustomResourceProps{
		OnCreate:            call,
		OnUpdate:            call,
		InstallLatestAwsSdk: jsii.Bool(false),
		Policy: customresources.AwsCustomResourcePolicy_FromStatements(&[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings(DescribeTableActions...),
			Resources: &[]*string{tableArn},
		})}),
		// a log group of its own: LogRetention would add the CDK's
		// log-retention function, whose policy has a wildcard resource
		LogGroup: awslogs.NewLogGroup(o.Construct, jsii.String("ReplicaStreamLogs"), &awslogs.LogGroupProps{
			Retention: p.LogRetention, RemovalPolicy: p.RemovalPolicy,
		}),
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	attrs := &awsdynamodb.TableAttributesV2{
		TableName:      jsii.String(m.TableName),
		TableStreamArn: o.ReplicaStream.GetResponseField(jsii.String(ReplicaStreamArnPath)),
		GlobalIndexes:  jsii.Strings(outbox.PendingIndexName),
	}
	if p.EncryptionKey != nil {
		attrs.EncryptionKey = p.EncryptionKey
	}
	o.GlobalTable = awsdynamodb.TableV2_FromTableAttributes(o.Construct, jsii.String("Table"), attrs)
	suppressCustomResourceFindings(o.Construct)
}

// ReplicaStreamArnPath is the DescribeTable response field of a replica's
// stream ARN (DynamoDB API reference, TableDescription.LatestStreamArn).
const ReplicaStreamArnPath = "Table.LatestStreamArn"

// awsCustomResourceProviderID is the construct id, under the stack, of the
// CDK's AwsCustomResource provider function (a singleton per stack; the CDK
// fixes it: aws-cdk-lib custom-resources, AwsCustomResource).
const awsCustomResourceProviderID = "AWS679f53fac002430cb0da5b7982bd2287"

// suppressCustomResourceFindings suppresses cdk-nag's findings on the
// CDK's AwsCustomResource provider function only (the CDK owns its runtime
// and its managed basic-execution policy).
func suppressCustomResourceFindings(scope constructs.Construct) {
	st := awscdk.Stack_Of(scope)
	cdknag.NagSuppressions_AddResourceSuppressionsByPath(st, jsii.String(*st.Node().Path()+"/"+awsCustomResourceProviderID), &[]*cdknag.NagPackSuppression{
		{Id: jsii.String("AwsSolutions-L1"), Reason: jsii.String("The CDK's AwsCustomResource provider (DescribeTable of the outbox replica, for its stream ARN) runs the Node.js runtime the CDK version pins.")},
		{Id: jsii.String("AwsSolutions-IAM4"), Reason: jsii.String("The CDK's AwsCustomResource provider uses AWSLambdaBasicExecutionRole for its logs; its only other permission is dynamodb:DescribeTable on the outbox table.")},
	}, jsii.Bool(true))
}

// replicationAlarms adds one ReplicationLatency alarm per other Region
// (this Region as the source: the metric is stored in the source Region).
func (o *Outbox) replicationAlarms() {
	m := o.props.MultiRegion
	threshold := m.ReplicationLatencyThreshold
	if threshold == 0 {
		threshold = DefaultReplicationLatencyThreshold
	}
	for _, r := range m.Regions {
		if r == o.region {
			continue
		}
		a := awscloudwatch.NewAlarm(o.Construct, jsii.String("ReplicationLatencyTo"+regionID(r)+"Alarm"), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("Replication of the outbox table from %[1]s (this Region) to %[2]s takes more than %[3]s "+
				"(no SLA on this latency): %[2]s is behind %[1]s, or the replication is paused. For a takeover's -lag-margin read the failed Region's "+
				"alarm if reachable, else the heartbeat ages outboxctl takeovers prints (docs/MULTI-REGION.md).", o.region, r, threshold)),
			Metric:             o.ReplicationLatencyMetric(r),
			Threshold:          jsii.Number(float64(threshold.Milliseconds())),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(ReplicationLatencyPeriods),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		o.Alarms = append(o.Alarms, a)
		o.ReplicationAlarms = append(o.ReplicationAlarms, a)
	}
}

// ReplicationLatencyMetric is the outbox table's ReplicationLatency from
// this Region to receiving, in milliseconds (maximum over one minute).
// Only in multi-Region mode.
func (o *Outbox) ReplicationLatencyMetric(receiving string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String(DynamoDBNamespace),
		MetricName: jsii.String(MetricReplicationLatency),
		DimensionsMap: &map[string]*string{
			DimensionTableName:       jsii.String(o.props.MultiRegion.TableName),
			DimensionReceivingRegion: jsii.String(receiving),
		},
		Statistic: jsii.String("Maximum"),
		Period:    awscdk.Duration_Minutes(jsii.Number(1)),
	})
}

// regionID turns "eu-west-1" into "EuWest1" for construct ids.
func regionID(r string) string {
	var b strings.Builder
	for _, part := range strings.Split(r, "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// Region returns the Region this Outbox serves in multi-Region mode, or ""
// in single-Region mode.
func (o *Outbox) Region() string { return o.region }

// GrantTakeover lets grantee (the role the operator runs outboxctl
// takeover / release / takeovers with) write, read and list the takeover
// items and read the heartbeats:
// exactly TakeoverActions on the outbox table (this Region's replica; the
// command writes in the surviving Region), plus KeyUseActions on
// Props.EncryptionKey when one is set. The takeover items live in the
// outbox table under keys beginning "takeover#"; IAM cannot scope a grant to
// a key prefix (dynamodb:LeadingKeys compares whole partition key values,
// with no "begins with" operator that holds for every request), so the
// grant is on the whole table: give it to operators only. In single-Region
// mode there is nothing to take over and it returns an error.
func (o *Outbox) GrantTakeover(grantee awsiam.IGrantable) (awsiam.Grant, error) {
	if o.props.MultiRegion == nil {
		return nil, fmt.Errorf("%w: GrantTakeover: a single-Region outbox has no takeover (set MultiRegion)", ErrInvalidProps)
	}
	g := awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings(TakeoverActions...),
		ResourceArns: &[]*string{o.OutboxTable().TableArn()},
	})
	o.grantKeyTo(grantee)
	return g, nil
}

// TakeoverStatements returns the policy statements GrantTakeover grants, for
// a managed policy or a role outside the app (nil in single-Region mode).
func (o *Outbox) TakeoverStatements() []awsiam.PolicyStatement {
	if o.props.MultiRegion == nil {
		return nil
	}
	return []awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(TakeoverActions...),
		Resources: &[]*string{o.OutboxTable().TableArn()},
	})}
}
