package stack

import (
	"testing"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/config"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// GIVEN the single-Region stacks (default, custom, the drop-in outbox)
// WHEN their templates are read
// THEN no multi-Region resource or setting appears: no global table, no
// DescribeTable custom resource, no ReplicationLatency alarm, no
// OUTBOX_REGIONS, no origin_region filter, no forwarder (issue 34: the
// single-Region template is unchanged; it was also compared byte for byte
// with the template before the change when multi-Region mode was added).
func TestSingleRegionTemplateHasNoMultiRegionPart(t *testing.T) {
	for name, s := range map[string]*synthesized{"default": def, "custom": custom, "drop-in": dropIn} {
		for _, typ := range []string{"AWS::DynamoDB::GlobalTable", "Custom::AWS"} {
			if ids := s.ofType(typ); len(ids) != 0 {
				t.Errorf("%s: %s %v", name, typ, ids)
			}
		}
		for _, word := range []string{config.EnvRegions, outboxcdk.MetricReplicationLatency, outbox.AttrOriginRegion, ForwarderID, outboxcdk.ReplicaStreamArnPath} {
			if mentions(t, s.json, word) {
				t.Errorf("%s: the template mentions %s", name, word)
			}
		}
	}
	if def.stack.Forwarder != nil || len(def.stack.Outbox.ReplicationAlarms) != 0 || def.stack.Outbox.GlobalTable != nil || def.stack.Outbox.Region() != "" {
		t.Error("the default stack has multi-Region parts")
	}
}
