package stack

import (
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// Multi-Region deployment of the example (docs/MULTI-REGION.md, issue 34):
// one OrdersStack per Region, each with OrdersStackProps.MultiRegion set
// alike and a concrete Region (StackProps.Env.Region). Every Region has its
// API, orders table (regional: an aggregate is written in its home Region
// only), outbox relay and reconciler on its replica of the global outbox
// table, bus and alarms. The consumers are homed in the primary Region:
// their functions, queues and state tables exist there only, and every
// other Region's stack forwards the outbox's events from its bus to the
// primary's (outboxcdk.NewConsumerForwarder).

// MaxRoleNameLength is IAM's limit on a role name.
const MaxRoleNameLength = 64

// MultiRegionBusName is the event bus name of every Region's stack in
// multi-Region mode: "<TableName>-events". A literal name, the same in
// each Region, so the other Regions' forwarders can target the primary's
// bus without a cross-Region reference.
func MultiRegionBusName(m *outboxcdk.MultiRegionProps) string { return m.TableName + "-events" }

// ForwarderRoleName is the physical name of Region region's forwarder role,
// "<TableName>-fwd-<region>" (IAM role names are per account, so the Region
// makes it unique), which the primary's bus policy lets publish.
func ForwarderRoleName(m *outboxcdk.MultiRegionProps, region string) string {
	return m.TableName + "-fwd-" + region
}

// ForwarderID is the construct id of the forwarder in a non-primary
// Region's stack.
const ForwarderID = "ForwardToHomeRegion"

// isHome reports whether the consumers live in this stack: single-Region
// mode, or the primary Region's stack.
func (s *OrdersStack) isHome() bool {
	m := s.props.MultiRegion
	return m == nil || s.Outbox.Region() == m.PrimaryRegion
}

// homedConsumers returns the names of the consumers this stack deploys:
// all of them in the home stack, none elsewhere.
func (s *OrdersStack) homedConsumers() []string {
	if s.isHome() {
		return consumerNames
	}
	return nil
}

// forwarderPublishers returns, in the primary Region's stack, the ARNs of
// the other Regions' forwarder roles (the bus policy's extra publishers);
// nil otherwise.
func (s *OrdersStack) forwarderPublishers() []*string {
	m := s.props.MultiRegion
	if m == nil || !s.isHome() {
		return nil
	}
	var arns []*string
	for _, r := range m.Regions {
		if r != m.PrimaryRegion {
			arns = append(arns, outboxcdk.ForwarderRoleArn(s.Stack, ForwarderRoleName(m, r)))
		}
	}
	return arns
}

// addForwarder creates, in a non-primary Region's stack, the forwarder of
// every outbox event to the primary's bus: one rule for all consumers
// (they share the home Region; a rule per consumer would deliver an event
// matched by two consumers twice to the home bus).
func (s *OrdersStack) addForwarder() error {
	m := s.props.MultiRegion
	f, err := outboxcdk.NewConsumerForwarder(s.Stack, ForwarderID, outboxcdk.ConsumerForwarderProps{
		Bus:                    s.Bus,
		HomeRegion:             m.PrimaryRegion,
		HomeBusName:            MultiRegionBusName(m),
		Pattern:                &awsevents.EventPattern{Source: jsii.Strings(s.props.EventSource)},
		Description:            "order events for the consumers homed in " + m.PrimaryRegion,
		RoleName:               ForwarderRoleName(m, s.Outbox.Region()),
		RemovalPolicy:          s.props.removalPolicy(),
		DeadLetterOperatorArns: s.props.RedriveRoleArns,
	})
	if err != nil {
		return err
	}
	s.Forwarder = f
	return nil
}

// validMultiRegion returns the problems of OrdersStackProps.MultiRegion the
// outbox construct does not check.
func (p OrdersStackProps) validMultiRegion() []error {
	m := p.MultiRegion
	if m == nil {
		return nil
	}
	var errs []error
	if p.CustomerManagedKey {
		errs = append(errs, errors.New("MultiRegion: CustomerManagedKey is not supported by the example stack in multi-Region mode "+
			"(each replica needs its Region's key ARN before the primary deploys: pass EncryptionKey and MultiRegion.ReplicaKeyArns)"))
	}
	for _, r := range slices.Compact(slices.Clone(m.Regions)) {
		if n := ForwarderRoleName(m, r); len(n) > MaxRoleNameLength {
			errs = append(errs, fmt.Errorf("MultiRegion: forwarder role name %q is longer than %d characters: shorten TableName", n, MaxRoleNameLength))
		}
	}
	return errs
}
