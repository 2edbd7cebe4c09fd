package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/examples/wallet"
	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// synthesized is the wallet stack synthesized once (with cdk-nag's
// AwsSolutions checks) against placeholder bootstrap files.
type synthesized struct {
	w   *Wallet
	res map[string]map[string]any
	nag []string
}

var (
	once   sync.Once
	synth  *synthesized
	synErr error
)

func template(t *testing.T) *synthesized {
	t.Helper()
	once.Do(func() { synth, synErr = build(t.TempDir()) })
	if synErr != nil {
		t.Fatal(synErr)
	}
	return synth
}

func build(dir string) (*synthesized, error) {
	for _, fn := range []string{"relay", "reconciler", "accounts", "statement"} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			return nil, err
		}
	}
	app := awscdk.NewApp(nil)
	w, err := NewWalletStack(app, "Wallet", WalletStackProps{AssetRoot: dir, EventSource: "com.example.wallet"})
	if err != nil {
		return nil, err
	}
	awscdk.Aspects_Of(w.Stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	tmpl := assertions.Template_FromStack(w.Stack, nil)
	raw, err := json.Marshal(*tmpl.ToJSON())
	if err != nil {
		return nil, err
	}
	var doc struct{ Resources map[string]map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	s := &synthesized{w: w, res: doc.Resources}
	ann := assertions.Annotations_FromStack(w.Stack)
	for _, f := range *ann.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		s.nag = append(s.nag, fmt.Sprintf("%s: %v", *f.Id, f.Entry.Data))
	}
	for _, f := range *ann.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
		s.nag = append(s.nag, fmt.Sprintf("warning %s: %v", *f.Id, f.Entry.Data))
	}
	return s, nil
}

// id is the logical id of c (or of its default child).
func (s *synthesized) id(c interface{ Node() constructs.Node }) string {
	el, ok := c.(awscdk.CfnElement)
	if !ok {
		el = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	return s.w.Stack.Resolve(el.LogicalId()).(string)
}

func (s *synthesized) props(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := s.res[id]
	if !ok {
		t.Fatalf("no resource %s in the template", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

func ref(id string) map[string]any { return map[string]any{"Ref": id} }

// asJSON compares template fragments by their JSON.
func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// GIVEN the wallet's stack with cdk-nag's AwsSolutions checks
// WHEN it is synthesized
// THEN cdk-nag reports nothing.
func TestWalletStackIsCdkNagClean(t *testing.T) {
	s := template(t)
	for _, e := range s.nag {
		t.Error(e)
	}
}

// GIVEN the wallet's stack
// WHEN it is synthesized
// THEN the statement consumer's rule routes every event of the Account
// aggregate from the wallet's source (no detail-type filter: the ordered
// consumer's rule) to its queue, and its sweep schedule ticks the same queue.
func TestStatementRuleMatchesTheWholeAggregate(t *testing.T) {
	s := template(t)
	rule := s.props(t, s.id(s.w.Statement.Rule))
	want := map[string]any{"source": []any{"com.example.wallet"}, "detail": map[string]any{"aggregate_type": []any{wallet.AggregateType}}}
	if !reflect.DeepEqual(rule["EventPattern"], want) {
		t.Errorf("statement rule pattern %s, want %s", asJSON(rule["EventPattern"]), asJSON(want))
	}
	if asJSON(rule["EventBusName"]) != asJSON(ref(s.id(s.w.Bus))) {
		t.Errorf("statement rule on bus %s, want the wallet's bus", asJSON(rule["EventBusName"]))
	}
	queueArn := asJSON(map[string]any{"Fn::GetAtt": []any{s.id(s.w.Statement.Queue), "Arn"}})
	targets, _ := rule["Targets"].([]any)
	if len(targets) != 1 || asJSON(targets[0].(map[string]any)["Arn"]) != queueArn {
		t.Errorf("statement rule targets %s, want the statement queue only", asJSON(targets))
	}
	if s.w.Statement.Sweep == nil {
		t.Fatal("the ordered statement consumer has no sweep schedule")
	}
	sweep := s.props(t, s.id(s.w.Statement.Sweep))
	sweepTargets, _ := sweep["Targets"].([]any)
	if sweep["ScheduleExpression"] == nil || len(sweepTargets) != 1 || asJSON(sweepTargets[0].(map[string]any)["Arn"]) != queueArn {
		t.Errorf("sweep schedule %s, want a schedule targeting the statement queue", asJSON(sweep))
	}
}

// GIVEN the wallet's stack
// WHEN it is synthesized
// THEN the statement's state table has key pk, the resequencer's buffered
// index and TTL; the accounts table has key id.
func TestTables(t *testing.T) {
	s := template(t)
	state := s.props(t, s.id(s.w.Statement.Table))
	if asJSON(state["KeySchema"]) != asJSON([]any{map[string]any{"AttributeName": dedup.AttrPK, "KeyType": "HASH"}}) {
		t.Errorf("state table key %s, want pk only", asJSON(state["KeySchema"]))
	}
	var index map[string]any
	for _, g := range state["GlobalSecondaryIndexes"].([]any) {
		if g.(map[string]any)["IndexName"] == dedup.BufferIndex {
			index = g.(map[string]any)
		}
	}
	if index == nil {
		t.Fatalf("state table indexes %s, want %q", asJSON(state["GlobalSecondaryIndexes"]), dedup.BufferIndex)
	}
	if asJSON(state["TimeToLiveSpecification"]) != asJSON(map[string]any{"AttributeName": dedup.TTLAttribute, "Enabled": true}) {
		t.Errorf("state table TTL %s, want %s", asJSON(state["TimeToLiveSpecification"]), dedup.TTLAttribute)
	}
	accounts := s.props(t, s.id(s.w.Accounts))
	if asJSON(accounts["KeySchema"]) != asJSON([]any{map[string]any{"AttributeName": wallet.KeyAttribute, "KeyType": "HASH"}}) {
		t.Errorf("accounts table key %s, want id", asJSON(accounts["KeySchema"]))
	}
}

// GIVEN the wallet's stack
// WHEN it is synthesized
// THEN each function has the variables its runtime reads: the accounts
// function wallet.WriterConfigFromEnv's, the statement function
// dedup.ConsumerConfigFromEnv's and sqsconsumer.ConfigFromEnv's, naming
// the resources of this stack.
func TestEnvironment(t *testing.T) {
	s := template(t)
	env := func(fn interface{ Node() constructs.Node }) map[string]any {
		p := s.props(t, s.id(fn))
		e, _ := p["Environment"].(map[string]any)
		v, _ := e["Variables"].(map[string]any)
		return v
	}
	acc := env(s.w.AccountFn)
	for name, want := range map[string]any{
		wallet.EnvAccountsTable: ref(s.id(s.w.Accounts)),
		config.EnvOutboxTable:   ref(s.id(s.w.Outbox.Table)),
		config.EnvEventSource:   "com.example.wallet",
	} {
		if asJSON(acc[name]) != asJSON(want) {
			t.Errorf("accounts function %s = %s, want %s", name, asJSON(acc[name]), asJSON(want))
		}
	}
	if acc[config.EnvPendingShards] == nil {
		t.Errorf("accounts function has no %s", config.EnvPendingShards)
	}
	st := env(s.w.StmtFn)
	for name, want := range map[string]any{
		config.EnvConsumerTable:  ref(s.id(s.w.Statement.Table)),
		config.EnvEventSource:    "com.example.wallet",
		config.EnvConsumerDLQURL: ref(s.id(s.w.Statement.DLQ.Queue)),
	} {
		if asJSON(st[name]) != asJSON(want) {
			t.Errorf("statement function %s = %s, want %s", name, asJSON(st[name]), asJSON(want))
		}
	}
	if st[config.EnvExpectedEventAccount] == nil {
		t.Errorf("statement function has no %s", config.EnvExpectedEventAccount)
	}
}

// GIVEN the wallet's stack
// WHEN it is synthesized
// THEN the accounts function may do AccountsActions on the accounts table
// and outboxcdk.WriteEventsActions on the outbox table, and nothing else on
// DynamoDB; the statement function has the construct's published lists on
// its state table and its buffer index, and nothing on the accounts or the
// outbox table.
func TestGrants(t *testing.T) {
	s := template(t)
	arn := func(id string) string { return asJSON(map[string]any{"Fn::GetAtt": []any{id, "Arn"}}) }
	accounts, outboxTable, state := arn(s.id(s.w.Accounts)), arn(s.id(s.w.Outbox.Table)), arn(s.id(s.w.Statement.Table))
	got := func(role string) map[string][]string { // resource → DynamoDB actions
		out := map[string][]string{}
		for _, r := range s.res {
			if r["Type"] != "AWS::IAM::Policy" {
				continue
			}
			p := r["Properties"].(map[string]any)
			if !slices.ContainsFunc(p["Roles"].([]any), func(x any) bool { return asJSON(x) == asJSON(ref(role)) }) {
				continue
			}
			for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
				m := st.(map[string]any)
				for _, a := range list(m["Action"]) {
					if len(a) < 9 || a[:9] != "dynamodb:" {
						continue
					}
					resources, ok := m["Resource"].([]any)
					if !ok {
						resources = []any{m["Resource"]}
					}
					for _, res := range resources {
						out[asJSON(res)] = append(out[asJSON(res)], a)
					}
				}
			}
		}
		for k := range out {
			sort.Strings(out[k])
		}
		return out
	}
	sorted := func(s []string) []string { c := slices.Clone(s); sort.Strings(c); return c }
	role := func(fn awslambda.Function) string { return s.id(fn.Role()) }
	if g, want := got(role(s.w.AccountFn)), map[string][]string{accounts: sorted(AccountsActions), outboxTable: sorted(outboxcdk.WriteEventsActions)}; !reflect.DeepEqual(g, want) {
		t.Errorf("accounts function's DynamoDB grants %v, want %v", g, want)
	}
	index := asJSON(map[string]any{"Fn::Join": []any{"", []any{map[string]any{"Fn::GetAtt": []any{s.id(s.w.Statement.Table), "Arn"}}, "/index/" + dedup.BufferIndex}}})
	if g, want := got(role(s.w.StmtFn)), map[string][]string{state: sorted(outboxcdk.ConsumerStateActions), index: sorted(outboxcdk.ConsumerBufferQueryActions)}; !reflect.DeepEqual(g, want) {
		t.Errorf("statement function's DynamoDB grants %v, want %v", g, want)
	}
}

func list(v any) []string {
	switch a := v.(type) {
	case string:
		return []string{a}
	case []any:
		out := make([]string, 0, len(a))
		for _, x := range a {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

// GIVEN wallet stack props without an asset root, or without an event source
// WHEN the stack is built
// THEN it is refused with an error naming what is missing.
func TestRefusedProps(t *testing.T) {
	if _, err := NewWalletStack(awscdk.NewApp(nil), "W1", WalletStackProps{EventSource: "com.example.wallet"}); err == nil {
		t.Error("no AssetRoot: no error")
	}
	_, err := NewWalletStack(awscdk.NewApp(nil), "W2", WalletStackProps{AssetRoot: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "EventSource") {
		t.Errorf("no EventSource: %v, want an error naming EventSource", err)
	}
}
