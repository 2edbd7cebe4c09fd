package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/infra/stack"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// GIVEN the multi-Region context keys, as -c strings
// WHEN the app reads them
// THEN the stack props carry outboxcdk.MultiRegionProps (table name
// defaulting to <stackName>-outbox); a primary Region without the list, a
// list without a primary and a one-Region list are errors; without the
// keys MultiRegion stays nil (single-Region mode).
func TestFromContextRegions(t *testing.T) {
	ctx := map[string]any{ctxAssetRoot: "/x", ctxRegions: "eu-west-1, eu-central-1", ctxPrimaryRegion: "eu-west-1"}
	cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := &outboxcdk.MultiRegionProps{Regions: []string{"eu-west-1", "eu-central-1"}, PrimaryRegion: "eu-west-1", TableName: DefaultStackName + "-outbox"}
	if !reflect.DeepEqual(cfg.props.MultiRegion, want) {
		t.Errorf("MultiRegion = %+v, want %+v", cfg.props.MultiRegion, want)
	}
	if err := cfg.props.Validate(); err != nil {
		t.Errorf("props invalid: %v", err)
	}
	for name, bad := range map[string]map[string]any{
		"no primary":     {ctxAssetRoot: "/x", ctxRegions: "eu-west-1,eu-central-1"},
		"no list":        {ctxAssetRoot: "/x", ctxPrimaryRegion: "eu-west-1"},
		"one Region":     {ctxAssetRoot: "/x", ctxRegions: "eu-west-1", ctxPrimaryRegion: "eu-west-1"},
		"not a Region":   {ctxAssetRoot: "/x", ctxRegions: "eu-west-1,mars", ctxPrimaryRegion: "eu-west-1"},
		"table, no list": {ctxAssetRoot: "/x", ctxGlobalTableName: "t"},
	} {
		if _, err := fromContext(func(k string) any { return bad[k] }, t.TempDir()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ctx[ctxCustomerManagedKey] = "true"
	if cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir()); err != nil || cfg.props.Validate() == nil {
		t.Errorf("customerManagedKey in multi-Region mode: %v, accepted", err)
	}
	cfg, err = fromContext(func(k string) any { return map[string]any{ctxAssetRoot: "/x"}[k] }, t.TempDir())
	if err != nil || cfg.props.MultiRegion != nil {
		t.Errorf("no keys: %v, MultiRegion %+v", err, cfg.props.MultiRegion)
	}
}

// template is one synthesized stack's resources.
type template map[string]map[string]any

func (tm template) ofType(typ string) []map[string]any {
	var out []map[string]any
	for _, r := range tm {
		if r["Type"] == typ {
			out = append(out, r)
		}
	}
	return out
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// GIVEN -c ddb-outbox:regions=eu-west-1,eu-central-1 -c ddb-outbox:primaryRegion=eu-west-1
// WHEN the app synthesizes offline (placeholder bootstraps, cdk-nag on)
// THEN there is one stack per Region, DdbOutbox-eu-west-1 and
// DdbOutbox-eu-central-1, in that Region, the second depending on the
// first; the primary holds the global table with a replica in
// eu-central-1, the consumers and a bus policy that lets eu-central-1's
// forwarder role publish; eu-central-1 imports its replica (DescribeTable
// custom resource), has no consumer and forwards to the primary's bus;
// both have their relay filtered on their own origin_region,
// OUTBOX_REGIONS on the api, relay and reconciler, a ReplicationLatency
// alarm to the other Region, and no cdk-nag finding.
func TestTwoRegionAppSynthesizes(t *testing.T) {
	dir := t.TempDir()
	for _, fn := range []string{"api", "relay", "reconciler", "ledger", "notifier", "fulfilment"} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := map[string]any{ctxAssetRoot: dir, ctxRegions: "eu-west-1,eu-central-1", ctxPrimaryRegion: "eu-west-1"}
	cfg, err := fromContext(func(k string) any { return ctx[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	stacks, err := newStacks(app, cfg)
	if err != nil {
		t.Fatal(err)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	asm := app.Synth(nil)

	names := []string{RegionStackName(DefaultStackName, "eu-west-1"), RegionStackName(DefaultStackName, "eu-central-1")}
	if len(stacks) != 2 || *stacks[0].StackName() != names[0] || *stacks[1].StackName() != names[1] {
		t.Fatalf("stacks %v, want %v", stacks, names)
	}
	tmpl := map[string]template{}
	for i, name := range names {
		art := asm.GetStackByName(jsii.String(name))
		region := strings.TrimPrefix(name, DefaultStackName+"-")
		if *art.Environment().Region != region {
			t.Errorf("%s deploys to %s", name, *art.Environment().Region)
		}
		for _, f := range *assertions.Annotations_FromStack(stacks[i].Stack).FindError(jsii.String("*"), assertions.Match_AnyValue()) {
			t.Errorf("%s: %s: %v", name, *f.Id, f.Entry.Data)
		}
		var deps []string
		for _, d := range *art.Dependencies() {
			deps = append(deps, *d.Id())
		}
		if i == 1 && !slices.Contains(deps, names[0]) {
			t.Errorf("%s depends on %v, want %s", name, deps, names[0])
		}
		raw, err := os.ReadFile(*art.TemplateFullPath())
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Resources template }
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		tmpl[region] = doc.Resources
		t.Logf("%s: %d resources", name, len(doc.Resources))
	}
	p, r := tmpl["eu-west-1"], tmpl["eu-central-1"]

	if g := p.ofType("AWS::DynamoDB::GlobalTable"); len(g) != 1 || !strings.Contains(jsonString(g[0]), `"Region":"eu-central-1"`) {
		t.Errorf("primary global tables: %s", jsonString(g))
	}
	if n := len(r.ofType("AWS::DynamoDB::GlobalTable")); n != 0 || len(r.ofType("Custom::AWS")) != 1 {
		t.Errorf("eu-central-1: %d global tables, %d custom resources; want 0 and 1", n, len(r.ofType("Custom::AWS")))
	}
	// consumers in the primary only: its three consumer functions and queues
	fns := func(tm template) int { return len(tm.ofType("AWS::Lambda::Function")) }
	if fns(p) <= fns(r) || len(r.ofType("AWS::Lambda::EventSourceMapping")) != 1 {
		t.Errorf("functions: primary %d, eu-central-1 %d; mappings in eu-central-1 %d (want the relay's only)",
			fns(p), fns(r), len(r.ofType("AWS::Lambda::EventSourceMapping")))
	}
	m := cfg.props.MultiRegion
	role := stack.ForwarderRoleName(m, "eu-central-1")
	var forwards bool
	for _, rule := range r.ofType("AWS::Events::Rule") {
		s := jsonString(rule)
		if strings.Contains(s, ":events:eu-west-1:") && strings.Contains(s, "event-bus/"+stack.MultiRegionBusName(m)) {
			forwards = true
		}
	}
	if !forwards {
		t.Error("eu-central-1 has no rule forwarding to the primary's bus")
	}
	for _, bus := range p.ofType("AWS::Events::EventBus") {
		if s := jsonString(bus); !strings.Contains(s, ":role/"+role) || !strings.Contains(s, stack.MultiRegionBusName(m)) {
			t.Errorf("primary bus does not name %s or the bus name: %s", role, s)
		}
	}
	for region, tm := range tmpl {
		var filtered, alarmed bool
		for _, es := range tm.ofType("AWS::Lambda::EventSourceMapping") {
			if s := jsonString(es); strings.Contains(s, "origin_region") && strings.Contains(s, region) {
				filtered = true
			}
		}
		for _, a := range tm.ofType("AWS::CloudWatch::Alarm") {
			if s := jsonString(a); strings.Contains(s, outboxcdk.MetricReplicationLatency) && !strings.Contains(s, `"Value":"`+region+`"`) {
				alarmed = true
			}
		}
		withRegions := 0
		for _, fn := range tm.ofType("AWS::Lambda::Function") {
			if strings.Contains(jsonString(fn), `"`+config.EnvRegions+`":"eu-west-1,eu-central-1"`) {
				withRegions++
			}
		}
		if !filtered || !alarmed || withRegions < 3 {
			t.Errorf("%s: relay filtered on its Region %v, ReplicationLatency alarm %v, %d functions with %s (want api, relay, reconciler)",
				region, filtered, alarmed, withRegions, config.EnvRegions)
		}
	}
}
