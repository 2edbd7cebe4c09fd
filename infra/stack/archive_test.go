package stack

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/appenv"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// GIVEN the default stack, the custom one (source com.example.custom,
// retention 30 days, a customer managed key, a replay role) and the
// construct dropped into a bare stack
// WHEN the archives are read
// THEN each has one AWS::Events::Archive on its bus whose pattern is the
// outbox's source only and whose retention is the configured one (365
// days by default); the custom one is encrypted with the stack's key,
// whose policy lets EventBridge use it only under the bus's encryption
// context; the replay role may start and describe replays of that
// archive only; the ArchiveName output names it.
func TestArchiveKeepsEveryOutboxEvent(t *testing.T) {
	for _, c := range []struct {
		name   string
		s      *synthesized
		source string
		days   float64
	}{
		{"default", def, appenv.EventSource, config.DefaultArchiveRetentionDays},
		{"custom", custom, "com.example.custom", 30},
		{"drop-in", dropIn, appenv.EventSource, config.DefaultArchiveRetentionDays},
	} {
		s := c.s
		ids := s.ofType("AWS::Events::Archive")
		if len(ids) != 1 {
			t.Fatalf("%s: archives %v, want one", c.name, ids)
		}
		p := s.props(t, ids[0])
		if !jsonEqual(t, p["EventPattern"], map[string]any{"source": []any{c.source}}) {
			t.Errorf("%s: archive pattern %v, want the outbox's source %s only", c.name, p["EventPattern"], c.source)
		}
		if p["RetentionDays"] != c.days {
			t.Errorf("%s: archive retention %v days, want %v", c.name, p["RetentionDays"], c.days)
		}
		if buses := s.ofType("AWS::Events::EventBus"); len(buses) != 1 || !mentions(t, p["SourceArn"], buses[0]) {
			t.Errorf("%s: archive source %v is not the outbox's bus", c.name, p["SourceArn"])
		}
		if c.s == dropIn {
			continue
		}
		out := get(s.json, "Outputs", "ArchiveName", "Value")
		if !jsonEqual(t, out, ref(ids[0])) {
			t.Errorf("%s: ArchiveName output %v, want Ref %s", c.name, out, ids[0])
		}
	}

	// encrypted like the rest in the custom stack
	p := custom.props(t, custom.ofType("AWS::Events::Archive")[0])
	keyID := custom.id(custom.stack.EncryptionKey)
	if !mentions(t, p["KmsKeyIdentifier"], keyID) {
		t.Errorf("custom archive KmsKeyIdentifier %v, want key %s", p["KmsKeyIdentifier"], keyID)
	}
	if k := def.props(t, def.ofType("AWS::Events::Archive")[0])["KmsKeyIdentifier"]; k != nil && k != "" {
		t.Errorf("default archive KmsKeyIdentifier %v, want none (an AWS owned key)", k)
	}
	// AWS's key policy for archives, as the CDK writes it: DescribeKey,
	// and the data key actions only under this bus's encryption context
	var describe, use bool
	for _, st := range policyStatements(custom.props(t, keyID)["KeyPolicy"]) {
		if !mentions(t, get(st, "Principal"), "events.amazonaws.com") || get(st, "Sid") == KeyForEventBridgeStatementID {
			continue
		}
		switch {
		case jsonEqual(t, get(st, "Action"), "kms:DescribeKey"):
			describe = true
		case jsonEqual(t, get(st, "Action"), []any{"kms:Decrypt", "kms:GenerateDataKey", "kms:ReEncrypt*"}) &&
			jsonEqual(t, get(st, "Condition", "StringEquals", "kms:EncryptionContext:aws:events:event-bus:arn"), getAtt(custom.id(custom.stack.Bus), "Arn")):
			use = true
		default:
			t.Errorf("key policy statement for EventBridge: %v", normalize(t, st))
		}
	}
	if !describe || !use {
		t.Errorf("the custom key's policy does not let EventBridge encrypt the archive (DescribeKey %v, data keys under the bus's context %v)", describe, use)
	}

	// the replay policy: exactly the replay actions on this archive,
	// attached to the replay role; the default stack attaches it to no one
	pol := custom.props(t, custom.id(custom.stack.ReplayPolicy))
	// attached to the replay role in its account only (issue 32:
	// TestReplayPolicyIsAttachedInTheRolesAccountOnly checks the condition)
	if !mentions(t, pol["Roles"], `["ddb-outbox-replay"]`) {
		t.Errorf("replay policy attached to %v, want the replay role", pol["Roles"])
	}
	archive := getAtt(custom.ofType("AWS::Events::Archive")[0], "Arn")
	found := false
	for _, st := range policyStatements(pol["PolicyDocument"]) {
		if jsonEqual(t, get(st, "Resource"), archive) {
			found = jsonEqual(t, get(st, "Action"), outboxcdk.ReplayActions)
		}
		if mentions(t, get(st, "Action"), "events:StartReplay") && !jsonEqual(t, get(st, "Resource"), archive) {
			t.Errorf("StartReplay on %v, want this archive only", normalize(t, get(st, "Resource")))
		}
	}
	if !found {
		t.Errorf("the replay policy does not allow %v on the archive", outboxcdk.ReplayActions)
	}
	if r := def.props(t, def.id(def.stack.ReplayPolicy))["Roles"]; r != nil {
		t.Errorf("default replay policy attached to %v", r)
	}
	for _, st := range statements(t, def) {
		for _, a := range st.actions {
			if a == "events:StartReplay" {
				t.Errorf("default stack: %s may start replays (no replay role given)", st.role)
			}
		}
	}
}
