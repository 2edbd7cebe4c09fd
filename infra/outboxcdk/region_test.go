package outboxcdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

const (
	primary  = "eu-west-1"
	replica  = "eu-central-1"
	gtName   = "wallet-outbox"
	homeBus  = "wallet-events"
	fwdRole  = "wallet-fwd-eu-central-1"
	opsRole  = "arn:aws:iam::123456789012:role/ops"
	walletSr = "com.example.wallet"
)

// fakeKey stands in for a KMS key; Validate only checks it is set.
type fakeKey struct{ awskms.IKey }

func multiRegion() *MultiRegionProps {
	return &MultiRegionProps{Regions: []string{primary, replica}, PrimaryRegion: primary, TableName: gtName}
}

// GIVEN MultiRegionProps with one fault each
// WHEN Props are validated
// THEN each is refused with ErrInvalidProps naming the fault.
func TestMultiRegionPropsValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		mutate  func(*Props)
		wantErr string
	}{
		{"valid", func(*Props) {}, ""},
		{"one Region", func(p *Props) { p.MultiRegion.Regions = []string{primary} }, "names one Region"},
		{"bad Region", func(p *Props) { p.MultiRegion.Regions = []string{primary, "Europe"} }, "not an AWS Region name"},
		{"twice", func(p *Props) { p.MultiRegion.Regions = []string{primary, primary} }, "twice"},
		{"primary not listed", func(p *Props) { p.MultiRegion.PrimaryRegion = "us-east-1" }, "PrimaryRegion"},
		{"primary not first", func(p *Props) { p.MultiRegion.Regions = []string{replica, primary} }, "is not the first of Regions [eu-central-1 eu-west-1]: the first Region is the legacy owner"},
		{"no table name", func(p *Props) { p.MultiRegion.TableName = "" }, "TableName"},
		{"bad table name", func(p *Props) { p.MultiRegion.TableName = "a b" }, "TableName"},
		{"key without replica keys", func(p *Props) { p.EncryptionKey = fakeKey{} }, "ReplicaKeyArns has no key for replica Region eu-central-1"},
		{"key with replica keys", func(p *Props) {
			p.EncryptionKey = fakeKey{}
			p.MultiRegion.ReplicaKeyArns = map[string]string{replica: "arn:aws:kms:eu-central-1:123456789012:key/k"}
		}, ""},
		{"replica key of the primary", func(p *Props) {
			p.MultiRegion.ReplicaKeyArns = map[string]string{primary: "arn:aws:kms:eu-west-1:123456789012:key/k"}
		}, "not a replica Region"},
		{"negative threshold", func(p *Props) { p.MultiRegion.ReplicationLatencyThreshold = -time.Second }, "ReplicationLatencyThreshold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := valid()
			p.MultiRegion = multiRegion()
			c.mutate(&p)
			err := p.Validate()
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidProps) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidProps containing %q", err, c.wantErr)
			}
		})
	}
}

// regionStacks are a two-Region app's stacks, synthesized once.
type regionStacks struct {
	primary, replica *consumerStack
	obP, obR         *Outbox
	writerP, writerR awslambda.Function
	operator         awsiam.Role
	fwd              *ConsumerForwarder
	refused          error // NewConsumer on a replicated state table
	refusedV1        error // ... on a Table with replication Regions
	noRegion, alien  error // New in an environment-agnostic stack, in a Region not listed
	fwdHome          error // a forwarder whose home is its own Region
}

var (
	rsOnce sync.Once
	rs     *regionStacks
	rsErr  error
)

func synthRegions(t *testing.T) *regionStacks {
	t.Helper()
	rsOnce.Do(func() { rs, rsErr = buildRegionStacks(t.TempDir()) })
	if rsErr != nil {
		t.Fatal(rsErr)
	}
	return rs
}

func buildRegionStacks(dir string) (*regionStacks, error) {
	for _, fn := range []string{RelayFunction, ReconcilerFunction, "writer", "ledger"} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			return nil, err
		}
	}
	r := &regionStacks{}
	// one app per stack: a second Template_FromStack of one app runs the
	// aspects (the alarm actions) again
	build := func(region string) (awscdk.Stack, *Outbox, awslambda.Function, awsevents.EventBus, error) {
		st := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Wallet-"+region), &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String(region)}})
		bus := awsevents.NewEventBus(st, jsii.String("Bus"), &awsevents.EventBusProps{EventBusName: jsii.String(homeBus)})
		ob, err := New(st, "Outbox", Props{EventBus: bus, EventSource: walletSr, AssetRoot: dir, MultiRegion: multiRegion()})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		w, err := gofunc.New(st, "Writer", gofunc.Props{AssetDir: filepath.Join(dir, "writer")})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		ob.GrantWriteEvents(w)
		return st, ob, w, bus, nil
	}
	stP, obP, wP, _, err := build(primary)
	if err != nil {
		return nil, err
	}
	stR, obR, wR, busR, err := build(replica)
	if err != nil {
		return nil, err
	}
	r.obP, r.obR, r.writerP, r.writerR = obP, obR, wP, wR
	r.operator = awsiam.NewRole(stR, jsii.String("Operator"), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
	if _, err := obR.GrantTakeover(r.operator); err != nil {
		return nil, err
	}
	pattern := ConsumerProps{EventSource: walletSr, AggregateType: "Wallet"}.EventPattern()
	if r.fwd, err = NewConsumerForwarder(stR, "Forward", ConsumerForwarderProps{
		Bus: busR, HomeRegion: primary, HomeBusName: homeBus, Pattern: pattern, RoleName: fwdRole,
		DeadLetterOperatorArns: []string{opsRole},
	}); err != nil {
		return nil, err
	}
	_, r.fwdHome = NewConsumerForwarder(stP, "Loop", ConsumerForwarderProps{
		Bus: busR, HomeRegion: primary, HomeBusName: homeBus, Pattern: pattern,
	})

	// a consumer whose state table is a global table: refused
	global := awsdynamodb.NewTableV2(stP, jsii.String("GlobalState"), &awsdynamodb.TablePropsV2{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(dedup.AttrPK), Type: awsdynamodb.AttributeType_STRING},
		Replicas:     &[]*awsdynamodb.ReplicaTableProps{{Region: jsii.String(replica)}},
	})
	ledger, err := gofunc.New(stP, "Ledger", gofunc.Props{AssetDir: filepath.Join(dir, "ledger")})
	if err != nil {
		return nil, err
	}
	_, r.refused = NewConsumer(stP, "GlobalLedger", ConsumerProps{
		Outbox: obP, Name: "ledger", Function: ledger, Ordering: dedup.Ordered, AggregateType: "Wallet", Table: global,
	})
	// a regional TableV2 (no replica) is accepted
	regional := awsdynamodb.NewTableV2(stP, jsii.String("RegionalState"), &awsdynamodb.TablePropsV2{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(dedup.AttrPK), Type: awsdynamodb.AttributeType_STRING},
	})
	if _, err := NewConsumer(stP, "RegionalLedger", ConsumerProps{
		Outbox: obP, Name: "ledger", Function: ledger, Ordering: dedup.Unordered, AggregateType: "Wallet", Table: regional,
	}); err != nil {
		return nil, fmt.Errorf("regional TableV2 refused: %w", err)
	}

	// a Table (v1) with replication Regions, in a stack of its own (its
	// replica provider is not what the templates above test)
	v1 := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("V1"), &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String(primary)}})
	v1Table := awsdynamodb.NewTable(v1, jsii.String("State"), &awsdynamodb.TableProps{
		PartitionKey:       &awsdynamodb.Attribute{Name: jsii.String(dedup.AttrPK), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:        awsdynamodb.BillingMode_PAY_PER_REQUEST,
		ReplicationRegions: jsii.Strings(replica),
	})
	v1Fn, err := gofunc.New(v1, "Ledger", gofunc.Props{AssetDir: filepath.Join(dir, "ledger")})
	if err != nil {
		return nil, err
	}
	_, r.refusedV1 = NewConsumer(v1, "Ledger", ConsumerProps{
		EventBus: awsevents.NewEventBus(v1, jsii.String("Bus"), nil), EventSource: walletSr, AlarmTopic: NewAlarmTopic(v1, "Topic", nil),
		Name: "ledger", Function: v1Fn, Ordering: dedup.Ordered, AggregateType: "Wallet", Table: v1Table,
	})

	agnostic := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Agnostic"), nil)
	_, r.noRegion = New(agnostic, "Outbox", Props{EventBus: awsevents.NewEventBus(agnostic, jsii.String("Bus"), nil), EventSource: walletSr, AssetRoot: dir, MultiRegion: multiRegion()})
	alien := awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Alien"), &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String("us-east-1")}})
	_, r.alien = New(alien, "Outbox", Props{EventBus: awsevents.NewEventBus(alien, jsii.String("Bus"), nil), EventSource: walletSr, AssetRoot: dir, MultiRegion: multiRegion()})

	for _, st := range []awscdk.Stack{stP, stR} {
		awscdk.Aspects_Of(st).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	}
	if r.primary, err = templateOf(stP); err != nil {
		return nil, err
	}
	if r.replica, err = templateOf(stR); err != nil {
		return nil, err
	}
	return r, nil
}

// templateOf synthesizes st and collects its cdk-nag findings.
func templateOf(st awscdk.Stack) (*consumerStack, error) {
	tmpl := assertions.Template_FromStack(st, nil)
	raw, err := json.Marshal(*tmpl.ToJSON())
	if err != nil {
		return nil, err
	}
	var doc struct{ Resources map[string]map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	s := &consumerStack{stack: st, res: doc.Resources}
	ann := assertions.Annotations_FromStack(st)
	for _, f := range *ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		s.nag = append(s.nag, fmt.Sprintf("%s: %v", *f.Id, f.Entry.Data))
	}
	return s, nil
}

// ofType returns the resources of type typ by logical id.
func (s *consumerStack) ofType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.res {
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

// GIVEN a two-Region app: the primary's Outbox and the other's, each with a writer
// WHEN the stacks are synthesized
// THEN the primary holds the global table (TableV2) with a replica in the
// other Region, the outbox table's keys, index, NEW_IMAGE stream, TTL, PITR
// and encryption; the other stack creates no table.
func TestMultiRegionGlobalTableWithItsReplica(t *testing.T) {
	s := synthRegions(t)
	var p map[string]any
	for _, r := range s.primary.ofType("AWS::DynamoDB::GlobalTable") {
		if get(r, "Properties", "TableName") == gtName {
			p = r["Properties"].(map[string]any)
		}
	}
	if p == nil {
		t.Fatalf("primary: no global table %s", gtName)
	}
	if p["TableName"] != gtName || get(p, "StreamSpecification", "StreamViewType") != "NEW_IMAGE" ||
		get(p, "TimeToLiveSpecification", "AttributeName") != outbox.TTLAttribute || p["BillingMode"] != "PAY_PER_REQUEST" ||
		get(p, "GlobalSecondaryIndexes", 0, "IndexName") != outbox.PendingIndexName ||
		get(p, "SSESpecification", "SSEEnabled") != true {
		t.Errorf("global table properties = %s", jsonOf(p))
	}
	if jsonOf(p["KeySchema"]) != jsonOf([]any{
		map[string]any{"AttributeName": outbox.AttrPK, "KeyType": "HASH"}, map[string]any{"AttributeName": outbox.AttrSK, "KeyType": "RANGE"},
	}) {
		t.Errorf("KeySchema = %s", jsonOf(p["KeySchema"]))
	}
	var regions []string
	for _, rep := range asList(p["Replicas"]) {
		regions = append(regions, get(rep, "Region").(string))
		if get(rep, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled") != true || get(rep, "DeletionProtectionEnabled") != true {
			t.Errorf("replica %v: PITR or deletion protection off: %s", get(rep, "Region"), jsonOf(rep))
		}
	}
	if slices.Sort(regions); !slices.Equal(regions, []string{replica, primary}) {
		t.Errorf("replicas in %v, want %s and %s", regions, primary, replica)
	}
	for _, typ := range []string{"AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table"} {
		if n := len(s.replica.ofType(typ)); n != 0 {
			t.Errorf("replica stack creates %d %s", n, typ)
		}
	}
	for name, st := range map[string]*consumerStack{"primary": s.primary, "replica": s.replica} {
		for _, e := range st.nag {
			t.Errorf("%s: cdk-nag: %s", name, e)
		}
	}
}

// GIVEN the two Regions' relays
// WHEN their event source mappings are read
// THEN each filters on its own Region's origin_region, marshaled as
// outbox.StreamFilterPatternIn(region); the primary's reads the global
// table's StreamArn, the other's the stream ARN its DescribeTable custom
// resource read in its Region.
func TestMultiRegionRelayFilterAndStream(t *testing.T) {
	s := synthRegions(t)
	for _, c := range []struct {
		st     *consumerStack
		region string
	}{{s.primary, primary}, {s.replica, replica}} {
		maps := c.st.ofType("AWS::Lambda::EventSourceMapping")
		var found map[string]any
		for _, m := range maps {
			p := m["Properties"].(map[string]any)
			if get(p, "StartingPosition") == "TRIM_HORIZON" {
				found = p
			}
		}
		if found == nil {
			t.Fatalf("%s: no stream mapping", c.region)
		}
		var got any
		if err := json.Unmarshal([]byte(get(found, "FilterCriteria", "Filters", 0, "Pattern").(string)), &got); err != nil {
			t.Fatal(err)
		}
		var want any
		raw, _ := json.Marshal(outbox.StreamFilterPatternIn(c.region))
		_ = json.Unmarshal(raw, &want)
		if !reflect.DeepEqual(got, want) || get(got, "dynamodb", "NewImage", outbox.AttrOriginRegion, "S", 0) != c.region {
			t.Errorf("%s: filter %s, want %s", c.region, jsonOf(got), jsonOf(want))
		}
		src := jsonOf(found["EventSourceArn"])
		if c.region == primary && !strings.Contains(src, `"StreamArn"`) {
			t.Errorf("primary mapping reads %s, want the global table's StreamArn", src)
		}
		if c.region == replica && !strings.Contains(src, ReplicaStreamArnPath) {
			t.Errorf("replica mapping reads %s, want the custom resource's %s", src, ReplicaStreamArnPath)
		}
	}
	crs := s.replica.ofType("Custom::AWS")
	if len(crs) != 1 || len(s.primary.ofType("Custom::AWS")) != 0 {
		t.Fatalf("custom resources: replica %d, primary %d; want 1 and 0", len(crs), len(s.primary.ofType("Custom::AWS")))
	}
	for _, cr := range crs {
		create := jsonOf(get(cr, "Properties", "Create"))
		for _, want := range []string{"DescribeTable", "DynamoDB", gtName, replica, ReplicaStreamArnPath} {
			if !strings.Contains(create, want) {
				t.Errorf("custom resource Create %s lacks %s", create, want)
			}
		}
	}
	// the custom resource's role may DescribeTable the table in its Region only
	var described bool
	for _, pol := range s.replica.ofType("AWS::IAM::Policy") {
		for _, st := range asList(get(pol, "Properties", "PolicyDocument", "Statement")) {
			if jsonOf(get(st, "Action")) == jsonOf("dynamodb:DescribeTable") {
				described = true
				if res := jsonOf(get(st, "Resource")); !strings.Contains(res, ":dynamodb:"+replica+":") || !strings.Contains(res, "table/"+gtName) {
					t.Errorf("DescribeTable on %s", res)
				}
			}
		}
	}
	if !described {
		t.Error("no DescribeTable grant")
	}
}

// GIVEN the two stacks
// WHEN their alarms are read
// THEN each has one ReplicationLatency alarm, this Region as source and the
// other as ReceivingRegion, notifying the alarm topic on ALARM and OK.
func TestMultiRegionReplicationLatencyAlarms(t *testing.T) {
	s := synthRegions(t)
	for _, c := range []struct {
		st             *consumerStack
		ob             *Outbox
		self, receiver string
	}{{s.primary, s.obP, primary, replica}, {s.replica, s.obR, replica, primary}} {
		var n int
		topic := c.st.id(c.ob.AlarmTopic)
		for id, a := range c.st.ofType("AWS::CloudWatch::Alarm") {
			p := a["Properties"].(map[string]any)
			if p["MetricName"] != MetricReplicationLatency {
				continue
			}
			n++
			dims := map[string]any{}
			for _, d := range asList(p["Dimensions"]) {
				dims[get(d, "Name").(string)] = get(d, "Value")
			}
			if p["Namespace"] != DynamoDBNamespace || dims[DimensionTableName] != gtName || dims[DimensionReceivingRegion] != c.receiver {
				t.Errorf("%s: alarm %s: %s", c.self, id, jsonOf(p))
			}
			// The metric is this Region → the other: a sustained alarm says
			// the other Region is behind; the lag a takeover of this Region
			// needs is read from this alarm, so the advice names the failed
			// Region's alarm, not this one's.
			desc, _ := p["AlarmDescription"].(string)
			for _, w := range []string{"from " + c.self + " (this Region) to " + c.receiver, c.receiver + " is behind " + c.self, "the failed Region's alarm", "outboxctl takeovers"} {
				if !strings.Contains(desc, w) {
					t.Errorf("%s: alarm %s description %q, want %q", c.self, id, desc, w)
				}
			}
			if strings.Contains(desc, "add at least this lag") {
				t.Errorf("%s: alarm %s description %q tells to add this Region's outgoing lag to -lag-margin", c.self, id, desc)
			}
			if jsonOf(p["AlarmActions"]) != jsonOf([]any{ref(topic)}) || jsonOf(p["OKActions"]) != jsonOf([]any{ref(topic)}) {
				t.Errorf("%s: alarm %s actions %s / %s", c.self, id, jsonOf(p["AlarmActions"]), jsonOf(p["OKActions"]))
			}
		}
		if n != 1 || len(c.ob.ReplicationAlarms) != 1 {
			t.Errorf("%s: %d ReplicationLatency alarms (%d listed), want 1", c.self, n, len(c.ob.ReplicationAlarms))
		}
	}
}

// GIVEN the two stacks' relay, reconciler and writer
// WHEN their environments and grants are read
// THEN each has OUTBOX_REGIONS; the writer may check and read the home
// item, the reconciler sweep and mark takeovers, the operator role
// GrantTakeover names take over, each on this Region's table only.
func TestMultiRegionEnvironmentAndGrants(t *testing.T) {
	s := synthRegions(t)
	want := primary + "," + replica
	for _, c := range []struct {
		st     *consumerStack
		ob     *Outbox
		writer awslambda.Function
	}{{s.primary, s.obP, s.writerP}, {s.replica, s.obR, s.writerR}} {
		for _, fn := range []awslambda.Function{c.ob.Relay, c.ob.Reconciler, c.writer} {
			env := get(c.st.props(t, c.st.id(fn)), "Environment", "Variables").(map[string]any)
			if env[config.EnvRegions] != want || env[config.EnvOutboxTable] == nil {
				t.Errorf("%s: %s = %v", c.st.id(fn), config.EnvRegions, env[config.EnvRegions])
			}
		}
		table := jsonOf(c.st.stack.Resolve(c.ob.OutboxTable().TableArn()))
		has := func(role string, actions []string) bool {
			got := c.st.grants(role)[table]
			for _, a := range actions {
				if !slices.Contains(got, a) {
					return false
				}
			}
			return true
		}
		roleOf := func(fn awslambda.Function) string { return c.st.id(fn.Role()) }
		if !has(roleOf(c.writer), append(slices.Clone(WriteEventsActions), HomeCheckActions...)) {
			t.Errorf("writer grants on %s: %v", table, c.st.grants(roleOf(c.writer))[table])
		}
		if !has(roleOf(c.ob.Reconciler), append(slices.Clone(MarkActions), TakeoverSweepActions...)) {
			t.Errorf("reconciler grants on %s: %v", table, c.st.grants(roleOf(c.ob.Reconciler))[table])
		}
		if c.ob == s.obR {
			if !strings.Contains(table, replica) {
				t.Errorf("replica table ARN %s is not in %s", table, replica)
			}
			if !has(c.st.id(s.operator), TakeoverActions) {
				t.Errorf("operator grants: %v", c.st.grants(c.st.id(s.operator)))
			}
			// Least privilege: nothing the takeover commands call deletes.
			if got := c.st.grants(c.st.id(s.operator))[table]; slices.Contains(got, "dynamodb:DeleteItem") {
				t.Errorf("operator grants on %s include dynamodb:DeleteItem, which no takeover command calls: %v", table, got)
			}
		}
	}
	if _, err := (&Outbox{}).GrantTakeover(nil); !errors.Is(err, ErrInvalidProps) {
		t.Errorf("GrantTakeover in single-Region mode: %v", err)
	}
}

// GIVEN an Outbox in an environment-agnostic stack, one in a Region not
// listed, a forwarder homed in its own Region, and a consumer on a global
// state table
// WHEN they are created
// THEN each is refused with ErrInvalidProps (the consumer with
// ErrReplicatedStateTable); a regional TableV2 state table is accepted.
func TestMultiRegionRefusals(t *testing.T) {
	s := synthRegions(t)
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"token Region":      {s.noRegion, "is a token"},
		"Region not listed": {s.alien, "us-east-1 is not one of"},
		"forwarder loop":    {s.fwdHome, "could loop"},
		"global state":      {s.refused, "must be regional"},
		"replicated Table":  {s.refusedV1, "must be regional"},
	} {
		if !errors.Is(c.err, ErrInvalidProps) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidProps containing %q", name, c.err, c.want)
		}
	}
	if !errors.Is(s.refused, ErrReplicatedStateTable) || !errors.Is(s.refusedV1, ErrReplicatedStateTable) {
		t.Errorf("global state table: %v, want ErrReplicatedStateTable", s.refused)
	}
}

// GIVEN the forwarder in the non-primary Region
// WHEN its rule, role and DLQ are read
// THEN the rule on this Region's bus matches the consumers' pattern plus
// region = this Region, its target is the home Region's bus with the
// role, a retry policy and the DLQ; the role (trusted by EventBridge) may
// only events:PutEvents on that bus; the DLQ accepts the rule only.
func TestConsumerForwarder(t *testing.T) {
	s := synthRegions(t)
	st := s.replica
	rule := st.props(t, st.id(s.fwd.Rule))
	pattern := rule["EventPattern"].(map[string]any)
	if jsonOf(pattern["source"]) != jsonOf([]any{walletSr}) || jsonOf(pattern["region"]) != jsonOf([]any{replica}) ||
		jsonOf(get(pattern, "detail", detailAggregateType)) != jsonOf([]any{"Wallet"}) {
		t.Errorf("pattern = %s", jsonOf(pattern))
	}
	target := get(rule, "Targets", 0).(map[string]any)
	arn := jsonOf(target["Arn"])
	if !strings.Contains(arn, ":events:"+primary+":") || !strings.Contains(arn, "event-bus/"+homeBus) {
		t.Errorf("target ARN %s is not the home bus", arn)
	}
	if jsonOf(target["RoleArn"]) != jsonOf(getAtt(st.id(s.fwd.Role), "Arn")) ||
		jsonOf(get(target, "DeadLetterConfig", "Arn")) != jsonOf(getAtt(st.id(s.fwd.DLQ.Queue), "Arn")) ||
		get(target, "RetryPolicy", "MaximumRetryAttempts") != float64(DefaultForwardRetryAttempts) ||
		get(target, "RetryPolicy", "MaximumEventAgeInSeconds") != DefaultForwardMaxEventAge.Seconds() {
		t.Errorf("target = %s", jsonOf(target))
	}
	role := st.props(t, st.id(s.fwd.Role))
	if role["RoleName"] != fwdRole || !strings.Contains(jsonOf(role["AssumeRolePolicyDocument"]), "events.amazonaws.com") {
		t.Errorf("role = %s", jsonOf(role))
	}
	grants := st.grants(st.id(s.fwd.Role))
	if len(grants) != 1 || jsonOf(grants[arn]) != jsonOf([]string{"events:PutEvents"}) {
		t.Errorf("role grants = %v, want events:PutEvents on %s only", grants, arn)
	}
	var accepts bool
	for _, qp := range st.ofType("AWS::SQS::QueuePolicy") {
		if strings.Contains(jsonOf(get(qp, "Properties", "Queues")), st.id(s.fwd.DLQ.Queue)) &&
			strings.Contains(jsonOf(qp), jsonOf(getAtt(st.id(s.fwd.Rule), "Arn"))) {
			accepts = true
		}
	}
	if !accepts {
		t.Error("the forwarder's DLQ policy does not name the rule")
	}
	if got := jsonOf(st.stack.Resolve(ForwarderRoleArn(st.stack, fwdRole))); !strings.Contains(got, ":role/"+fwdRole) {
		t.Errorf("ForwarderRoleArn = %s", got)
	}
	if len(s.fwd.Alarms) != 3 {
		t.Errorf("%d forwarder alarms, want the DLQ's and the rule's two", len(s.fwd.Alarms))
	}
}
