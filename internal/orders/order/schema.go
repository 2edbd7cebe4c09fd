package order

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// Orders table key scheme and attribute names. The table has a single
// string partition key AttrPK and holds two kinds of items: orders
// ("ORDER#<id>") and idempotency records
// ("IDEMPOTENCY#<hex SHA-256 of the actor>#<key>", see IdempotencyKey):
// an idempotency key is scoped to the caller that sent it.
const (
	AttrPK             = "pk"              // S: KeyPrefixOrder+id or KeyPrefixIdempotency+actor hash+"#"+key
	AttrKind           = "kind"            // S: KindOrder or KindIdempotency
	AttrID             = "id"              // S: order id
	AttrCustomerID     = "customer_id"     // S
	AttrAmountMinor    = "amount_minor"    // N, integer minor units
	AttrCurrency       = "currency"        // S, ISO 4217 alphabetic
	AttrStatus         = "status"          // S: PLACED, PAID, SHIPPED, CANCELLED
	AttrVersion        = "version"         // N, optimistic concurrency version
	AttrCancelReason   = "cancel_reason"   // S, optional
	AttrCreatedAt      = "created_at"      // S, RFC 3339 nanoseconds, UTC
	AttrUpdatedAt      = "updated_at"      // S, RFC 3339 nanoseconds, UTC
	AttrCreatedBy      = "created_by"      // S, the actor of the create (orders; optional)
	AttrUpdatedBy      = "updated_by"      // S, the actor of the last change (orders; optional)
	AttrActor          = "actor"           // S, the caller the key belongs to (idempotency records)
	AttrIdempotencyKey = "idempotency_key" // S, idempotency records only
	AttrOrderID        = "order_id"        // S, idempotency records only
	AttrRequestHash    = "request_hash"    // S, idempotency records only
	AttrOrder          = "order"           // M, idempotency records only: the order as first created
	AttrExpiresAt      = "expires_at"      // N, Unix epoch seconds; TTL, idempotency records only

	// TTLAttribute is the orders table's TTL attribute. Only idempotency
	// records carry it; orders never expire.
	TTLAttribute = AttrExpiresAt

	KeyPrefixOrder       = "ORDER#"
	KeyPrefixIdempotency = "IDEMPOTENCY#"

	KindOrder       = "ORDER"
	KindIdempotency = "IDEMPOTENCY"
)

// Defaults of RepositoryConfig.
const (
	DefaultIdempotencyTTL = 24 * time.Hour
	DefaultMaxAttempts    = 4
	DefaultBaseBackoff    = 25 * time.Millisecond
	// MaxIdempotencyKeyLen is the maximum Idempotency-Key length, in bytes.
	MaxIdempotencyKeyLen = 255
)

// OrderKey returns the orders table key of order id.
func OrderKey(id string) map[string]types.AttributeValue { //nolint:revive // exported: renaming an exported name is a breaking change (docs/VERSIONING.md)
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: KeyPrefixOrder + id}}
}

// IdempotencyKey returns the orders table key of the idempotency record of
// key sent by actor: "IDEMPOTENCY#<hex SHA-256 of IdempotencyScope(actor)>#<key>".
// Hashing bounds the key length (an IAM ARN may be 2,048 bytes; a DynamoDB
// partition key at most 2,048) whatever the actor; the actor itself is
// stored in the record (AttrActor). The same key from two scopes names two
// records, so one caller can neither see (409 oracle), replay nor squat
// another caller's key.
func IdempotencyKey(actor, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: &types.AttributeValueMemberS{Value: idempotencyPK(actor, key)}}
}

func idempotencyPK(actor, key string) string {
	sum := sha256.Sum256([]byte(IdempotencyScope(actor)))
	return KeyPrefixIdempotency + hex.EncodeToString(sum[:]) + "#" + key
}

// IdentityCenterRolePrefix starts the name of every role IAM Identity
// Center creates for a permission set ("AWSReservedSSO_<permission set>_<id>").
const IdentityCenterRolePrefix = "AWSReservedSSO_"

// IdempotencyScope returns the caller an idempotency key belongs to. For an
// assumed-role session ARN, "arn:<partition>:sts::<account>:assumed-role/<role>/<session>",
// it is the role without the session ("arn:<partition>:sts::<account>:assumed-role/<role>"):
// every session of one role is one caller, so an instance of a service can
// retry a request another instance (another session name: an ECS task id, an
// EC2 instance id) started. Any other actor (an IAM user ARN, a federated
// user, a Cognito identity, the API's local stand-in) is its own scope.
//
// Except the roles of IAM Identity Center permission sets (role names
// starting "AWSReservedSSO_"): each session of such a role is one person
// (the session name is the user's), so the session is the scope; one
// person's key never replays another's order. Other roles that federate
// several end users (AssumeRoleWithWebIdentity or AssumeRoleWithSAML outside
// Identity Center) cannot be told from service roles by their ARN: their
// users share the role's scope (docs/SECURITY-MODEL.md says how to call the
// API for such users).
func IdempotencyScope(actor string) string {
	const marker = ":assumed-role/"
	if !strings.HasPrefix(actor, "arn:") {
		return actor
	}
	i := strings.Index(actor, marker)
	if i < 0 || !strings.Contains(actor[:i], ":sts::") {
		return actor
	}
	rest := actor[i+len(marker):]
	j := strings.IndexByte(rest, '/')
	if j <= 0 || j == len(rest)-1 || strings.HasPrefix(rest, IdentityCenterRolePrefix) {
		return actor
	}
	return actor[:i+len(marker)+j]
}

// ValidateActor returns an error wrapping ErrValidation unless actor is
// 1..outbox.MaxActorLen (2,048) bytes of printable ASCII (0x21..0x7e): an
// IAM principal ARN, or the API's local stand-in.
func ValidateActor(actor string) error {
	if actor == "" || len(actor) > outbox.MaxActorLen {
		return fmt.Errorf("%w: actor must be 1..%d bytes", ErrValidation, outbox.MaxActorLen)
	}
	for i := 0; i < len(actor); i++ {
		if actor[i] < 0x21 || actor[i] > 0x7e {
			return fmt.Errorf("%w: actor must be printable ASCII", ErrValidation)
		}
	}
	return nil
}

// CreateTableInput returns the orders table definition used by the local
// runtime and tests: a single string partition key AttrPK and on-demand
// billing, no stream (events travel through the outbox table). TTL on
// TTLAttribute is enabled separately, see TimeToLiveInput.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	}
}

// TimeToLiveInput returns the UpdateTimeToLive call that enables TTL on
// TTLAttribute (expiring idempotency records) for the orders table name.
func TimeToLiveInput(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	}
}
