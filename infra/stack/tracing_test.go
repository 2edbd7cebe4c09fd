package stack

import (
	"slices"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/infra/gofunc"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
)

// telemetryLayer is the custom stack's OTLP collector layer (an ADOT-style
// ARN; synth does not resolve it).
const telemetryLayer = "arn:aws:lambda:eu-west-1:901920570463:layer:aws-otel-collector-arm64-ver-0-117-0:1"

// roleActions returns every IAM action granted to the role with logical id
// role by the template's AWS::IAM::Policy resources.
func roleActions(s *synthesized, t *testing.T, role string) []string {
	var actions []string
	for _, pid := range s.ofType("AWS::IAM::Policy") {
		p := s.props(t, pid)
		attached := false
		for _, r := range get(p, "Roles").([]any) {
			attached = attached || jsonEqual(t, r, ref(role))
		}
		if !attached {
			continue
		}
		for _, st := range get(p, "PolicyDocument", "Statement").([]any) {
			switch a := get(st, "Action").(type) {
			case string:
				actions = append(actions, a)
			case []any:
				for _, x := range a {
					actions = append(actions, x.(string))
				}
			}
		}
	}
	return actions
}

// TestXRayActiveTracingOnEveryFunction: GIVEN the default stack WHEN
// synthesized THEN every Lambda function has X-Ray active tracing, its role
// may write trace segments and telemetry (the permissions Tracing.ACTIVE
// adds, nothing broader: no xray:* and no other X-Ray action), and no
// function exports OpenTelemetry spans (no layer, OUTBOX_TRACING unset:
// tracing in the code costs nothing).
func TestXRayActiveTracingOnEveryFunction(t *testing.T) {
	fns := def.ofType("AWS::Lambda::Function")
	if len(fns) < 6 {
		t.Fatalf("found %d functions, want at least 6 (api relay reconciler ledger notifier fulfilment)", len(fns))
	}
	for _, id := range fns {
		p := def.props(t, id)
		if get(p, "TracingConfig", "Mode") != "Active" {
			t.Errorf("%s: TracingConfig %v, want Mode Active", id, get(p, "TracingConfig"))
		}
		if get(p, "Layers") != nil {
			t.Errorf("%s: layers %v without a telemetry layer setting", id, get(p, "Layers"))
		}
		if v := get(p, "Environment", "Variables", config.EnvTracing); v != nil {
			t.Errorf("%s: %s=%v, want unset (off)", id, config.EnvTracing, v)
		}
		role, _ := get(p, "Role", "Fn::GetAtt", 0).(string)
		acts := roleActions(def, t, role)
		for _, want := range []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"} {
			if !slices.Contains(acts, want) {
				t.Errorf("%s: role %s lacks %s (has %v)", id, role, want, acts)
			}
		}
		for _, a := range acts {
			if a == "xray:*" || a == "*" || (len(a) > 5 && a[:5] == "xray:" && a != "xray:PutTraceSegments" && a != "xray:PutTelemetryRecords") {
				t.Errorf("%s: role %s has %s beyond what tracing needs", id, role, a)
			}
		}
	}
}

// TestTelemetryLayerTurnsTracingOn: GIVEN a telemetry layer ARN WHEN
// synthesized THEN every function carries the layer and the environment
// that turns its OpenTelemetry spans on, exported to the layer's local
// OTLP receiver.
func TestTelemetryLayerTurnsTracingOn(t *testing.T) {
	for _, id := range custom.ofType("AWS::Lambda::Function") {
		p := custom.props(t, id)
		if layers, _ := get(p, "Layers").([]any); len(layers) != 1 || layers[0] != telemetryLayer {
			t.Errorf("%s: layers %v, want [%s]", id, get(p, "Layers"), telemetryLayer)
		}
		env := get(p, "Environment", "Variables")
		if get(env, config.EnvTracing) != config.TracingOn || get(env, "OTEL_EXPORTER_OTLP_ENDPOINT") != gofunc.OTLPLocalEndpoint {
			t.Errorf("%s: environment %v, want %s=%s and OTEL_EXPORTER_OTLP_ENDPOINT=%s", id, env, config.EnvTracing, config.TracingOn, gofunc.OTLPLocalEndpoint)
		}
		if get(p, "TracingConfig", "Mode") != "Active" {
			t.Errorf("%s: TracingConfig %v, want Mode Active", id, get(p, "TracingConfig"))
		}
	}
}
