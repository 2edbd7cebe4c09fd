package outboxcdk

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

// ConsumerTableProps configures NewConsumerTable. Zero fields take the
// defaults.
type ConsumerTableProps struct {
	// EncryptionKey, when set, encrypts the table with this customer
	// managed KMS key; otherwise the AWS managed key (aws/dynamodb).
	EncryptionKey awskms.IKey
	// RemovalPolicy of the table. Default RETAIN. Deletion protection is
	// on unless it is DESTROY.
	RemovalPolicy awscdk.RemovalPolicy
}

// NewConsumerTable creates, as id under scope, a consumer's own state table
// for pkg/dedup: its dedup markers, ordering gates (ordered consumers) and
// resequencer buffer. The shape is dedup.CreateTableInput's, read from that
// Go definition (partition key dedup.AttrPK of type S, on-demand billing,
// the sparse buffer index dedup.BufferIndex of dedup.WithStateIndex), plus
// TTL on dedup.TTLAttribute, point-in-time recovery, encryption with the
// AWS managed key or props.EncryptionKey, and deletion protection unless
// props.RemovalPolicy is DESTROY. The consumer's function reads its name
// from config.EnvConsumerTable (NewConsumer sets it).
//
// A consumer that keeps its DynamoDB effects in a table of its own keeps
// its state there too (one transaction writes both): create that table
// with partition key "pk" (S) and TTL on dedup.TTLAttribute, call
// AddStateIndex on it and pass it as ConsumerProps.Table.
func NewConsumerTable(scope constructs.Construct, id string, props ConsumerTableProps) awsdynamodb.Table {
	if props.RemovalPolicy == "" {
		props.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	}
	in := dedup.CreateTableInput("")
	tp := &awsdynamodb.TableProps{
		BillingMode:         billingMode(in.BillingMode),
		TimeToLiveAttribute: jsii.String(dedup.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_AWS_MANAGED,
		DeletionProtection: jsii.Bool(props.RemovalPolicy != awscdk.RemovalPolicy_DESTROY),
		RemovalPolicy:      props.RemovalPolicy,
	}
	if props.EncryptionKey != nil {
		tp.Encryption = awsdynamodb.TableEncryption_CUSTOMER_MANAGED
		tp.EncryptionKey = props.EncryptionKey
	}
	tp.PartitionKey, tp.SortKey = keyAttributes(in.KeySchema, in.AttributeDefinitions)
	table := awsdynamodb.NewTable(scope, jsii.String(id), tp)
	addIndexes(table, in)
	return table
}

// AddStateIndex adds to table (a consumer's own table, partition key "pk"
// of type S, that holds its pkg/dedup state beside its effects) the sparse
// buffer index the resequencer's sweep queries: the index of
// dedup.WithStateIndex (dedup.BufferIndex, keys dedup.AttrBufferShard and
// dedup.AttrBufferedAt, both S, projecting dedup.BufferIndexAttributes),
// read from that Go definition. Without it an ordered consumer's sweep
// fails, and events a crash left in the buffer wait for ever.
func AddStateIndex(table awsdynamodb.Table) {
	addIndexes(table, dedup.WithStateIndex(&dynamodb.CreateTableInput{}))
}

// StateIndexArn returns the ARN (a token) of table's buffer index,
// <table ARN>/index/<dedup.BufferIndex>: the resource of
// ConsumerBufferQueryActions.
func StateIndexArn(table awsdynamodb.ITable) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{table.TableArn(), jsii.String("/index/" + dedup.BufferIndex)})
}

// addIndexes adds in's global secondary indexes to table.
func addIndexes(table awsdynamodb.Table, in *dynamodb.CreateTableInput) {
	for _, gsi := range in.GlobalSecondaryIndexes {
		pk, sk := keyAttributes(gsi.KeySchema, in.AttributeDefinitions)
		p := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:    gsi.IndexName,
			PartitionKey: pk,
			SortKey:      sk,
		}
		if gsi.Projection != nil {
			switch gsi.Projection.ProjectionType {
			case types.ProjectionTypeInclude:
				p.ProjectionType = awsdynamodb.ProjectionType_INCLUDE
				p.NonKeyAttributes = jsii.Strings(gsi.Projection.NonKeyAttributes...)
			case types.ProjectionTypeKeysOnly:
				p.ProjectionType = awsdynamodb.ProjectionType_KEYS_ONLY
			default:
				p.ProjectionType = awsdynamodb.ProjectionType_ALL
			}
		}
		table.AddGlobalSecondaryIndex(p)
	}
}

// keyAttributes returns the CDK partition and sort key attributes of a key
// schema, their types from defs. It panics on a definition the CDK cannot
// express, which only a change of pkg/dedup's own definitions could cause
// (TestConsumerTable catches it).
func keyAttributes(schema []types.KeySchemaElement, defs []types.AttributeDefinition) (pk, sk *awsdynamodb.Attribute) {
	for _, k := range schema {
		a := &awsdynamodb.Attribute{Name: k.AttributeName, Type: attributeType(*k.AttributeName, defs)}
		if k.KeyType == types.KeyTypeHash {
			pk = a
		} else {
			sk = a
		}
	}
	return pk, sk
}

func attributeType(name string, defs []types.AttributeDefinition) awsdynamodb.AttributeType {
	for _, d := range defs {
		if *d.AttributeName != name {
			continue
		}
		switch d.AttributeType {
		case types.ScalarAttributeTypeS:
			return awsdynamodb.AttributeType_STRING
		case types.ScalarAttributeTypeN:
			return awsdynamodb.AttributeType_NUMBER
		case types.ScalarAttributeTypeB:
			return awsdynamodb.AttributeType_BINARY
		}
	}
	panic(fmt.Sprintf("outboxcdk: pkg/dedup table definition: key attribute %q has no attribute definition", name))
}

func billingMode(m types.BillingMode) awsdynamodb.BillingMode {
	if m == types.BillingModeProvisioned {
		return awsdynamodb.BillingMode_PROVISIONED
	}
	return awsdynamodb.BillingMode_PAY_PER_REQUEST
}
