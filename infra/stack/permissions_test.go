package stack

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/app"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/routing"
	"github.com/ddb-outbox/ddb-outbox/pkg/dedup"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// GIVEN the default stack and app.Permissions (each function's SDK calls,
// checked against its code by internal/orders/app's TestPermissionsMatchSDKCalls, plus
// the grants Lambda uses on its behalf)
// WHEN each function's role policies are collected from the template
// THEN, resource by resource, the role allows exactly the declared actions:
// none missing (a call would be denied) and none extra (least privilege).
func TestRolesGrantExactlyTheDeclaredPermissions(t *testing.T) {
	if outboxcdk.RelayFunction != app.FunctionRelay || outboxcdk.ReconcilerFunction != app.FunctionReconciler || APIFunction != app.FunctionAPI {
		t.Fatal("function names of the stack and internal/orders/app differ")
	}
	if !slices.Equal(sortedActions(outboxcdk.KeyUseActions), sortedActions(app.KeyActions)) {
		t.Errorf("outboxcdk.KeyUseActions %v != app.KeyActions %v", outboxcdk.KeyUseActions, app.KeyActions)
	}
	checkRoles(t, def, func(p app.FunctionPermissions) app.FunctionPermissions { return p })
	// the custom stack encrypts with a customer managed key
	checkRoles(t, custom, app.FunctionPermissions.WithEncryptionKey)
	// the primary Region's stack of a two-Region deployment: the writer's
	// home check and the reconciler's takeover sweep (issue 34)
	checkRoles(t, primary, app.FunctionPermissions.WithRegions)
}

// checkRoles compares every function role of def (a synthesized stack)
// with app.Permissions, each transformed by perms.
func checkRoles(t *testing.T, def *synthesized, perms func(app.FunctionPermissions) app.FunctionPermissions) {
	t.Helper()
	s := def.stack
	ob := s.Outbox
	var tableID string
	if ob.GlobalTable != nil {
		tableID = def.id(ob.GlobalTable)
	} else {
		tableID = def.id(ob.Table)
	}
	table := getAtt(tableID, "Arn")
	shared := map[app.Resource]any{
		app.ResourceOrdersTable:            getAtt(def.id(s.OrdersTable), "Arn"),
		app.ResourceOutboxTable:            table,
		app.ResourcePendingIndex:           map[string]any{"Fn::Join": []any{"", []any{table, "/index/" + outbox.PendingIndexName}}},
		app.ResourceOutboxStream:           getAtt(tableID, "StreamArn"),
		app.ResourceEventBus:               getAtt(def.id(s.Bus), "Arn"),
		app.ResourceParkedQueue:            getAtt(def.id(ob.ParkedQueue.Queue), "Arn"),
		app.ResourceStreamFailureQueue:     getAtt(def.id(ob.StreamFailureQueue.Queue), "Arn"),
		app.ResourceReconcilerFailureQueue: getAtt(def.id(ob.ReconcilerFailureQueue.Queue), "Arn"),
		app.ResourceAll:                    "*",
	}
	if s.EncryptionKey != nil {
		shared[app.ResourceEncryptionKey] = getAtt(def.id(s.EncryptionKey), "Arn")
	}
	consumer := func(name string, table app.Resource) map[app.Resource]any {
		c := s.Consumers[name]
		return map[app.Resource]any{
			table:                     getAtt(def.id(c.Table), "Arn"),
			app.ResourceConsumerQueue: getAtt(def.id(c.Queue), "Arn"),
			app.ResourceConsumerDLQ:   getAtt(def.id(c.DLQ.Queue), "Arn"),
			// its dedup state's buffer index, in its own table
			app.ResourceConsumerStateIndex: map[string]any{"Fn::Join": []any{"", []any{getAtt(def.id(c.Table), "Arn"), "/index/" + dedup.BufferIndex}}},
		}
	}
	fulfilment := consumer(routing.ConsumerFulfilment, app.ResourceShipmentsTable)
	fulfilment[app.ResourceIdempotencyTable] = getAtt(def.id(s.IdempotencyTable), "Arn")
	fulfilment[app.ResourceProviderSecret] = secretArnOf(def)
	functions := map[string]struct {
		fn  awslambda.Function
		own map[app.Resource]any
	}{
		app.FunctionAPI:        {s.APIFunction, nil},
		app.FunctionRelay:      {ob.Relay, nil},
		app.FunctionReconciler: {ob.Reconciler, nil},
		app.FunctionLedger:     {s.Consumers[routing.ConsumerLedger].Function, consumer(routing.ConsumerLedger, app.ResourceLedgerTable)},
		app.FunctionNotifier:   {s.Consumers[routing.ConsumerNotifier].Function, consumer(routing.ConsumerNotifier, app.ResourceNotificationsTable)},
		app.FunctionFulfilment: {s.Consumers[routing.ConsumerFulfilment].Function, fulfilment},
	}
	key := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	checked := map[string]bool{}
	for _, declared := range app.Permissions() {
		perms := perms(declared)
		f, ok := functions[perms.Function]
		if !ok {
			t.Errorf("app.Permissions declares %s, which the stack does not deploy", perms.Function)
			continue
		}
		fnID := def.id(f.fn)
		role := roleOf(t, def, fnID)
		checked[role] = true
		arns := map[app.Resource]any{
			app.ResourceLogGroup: getAtt(get(def.props(t, fnID), "LoggingConfig", "LogGroup", "Ref").(string), "Arn"),
		}
		for r, a := range shared {
			arns[r] = a
		}
		for r, a := range f.own {
			arns[r] = a
		}
		want := map[string][]string{}
		for r, actions := range perms.Actions() {
			arn, ok := arns[r]
			if !ok {
				t.Fatalf("%s: no ARN for resource %s in this test", perms.Function, r)
			}
			want[key(arn)] = actions
		}
		got := map[string][]string{}
		for _, st := range statements(t, def) {
			if st.role != role {
				continue
			}
			for _, res := range st.resources {
				got[key(res)] = sortedActions(append(got[key(res)], st.actions...))
			}
		}
		if ob.GlobalTable != nil {
			// TableV2's stream grant (the CDK's) also names
			// dynamodb:ListStreams on the stream ARN, where it grants
			// nothing: the action has no resource-level permissions;
			// the construct grants it on "*" (checked above as declared).
			stream := key(shared[app.ResourceOutboxStream])
			if _, ok := got[stream]; ok {
				got[stream] = slices.DeleteFunc(got[stream], func(a string) bool { return a == "dynamodb:ListStreams" })
			}
		}
		for res, actions := range got {
			if w, ok := want[res]; !ok {
				t.Errorf("%s: role allows %v on %s, which app.Permissions does not declare", perms.Function, actions, res)
			} else if !slices.Equal(actions, w) {
				t.Errorf("%s: role allows %v on %s, app.Permissions declares %v", perms.Function, actions, res, w)
			}
		}
		for res, actions := range want {
			if _, ok := got[res]; !ok {
				t.Errorf("%s: app.Permissions declares %v on %s, which the role does not allow", perms.Function, actions, res)
			}
		}
	}
	if len(checked) != len(functions) {
		t.Errorf("checked %d roles, want %d", len(checked), len(functions))
	}
	// no other role carries a policy
	for _, st := range statements(t, def) {
		if !checked[st.role] {
			t.Errorf("role %s (%v) is not a function role checked against app.Permissions", st.role, st.actions)
		}
	}
}
