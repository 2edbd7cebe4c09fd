package stack

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// Issue 32 item 3 (b): the archive's retention of personal data is a
// stated setting with an erasure procedure.

// archiveNotes returns the synth info messages of st about the archive's
// personal data.
func archiveNotes(st *OrdersStack) []string {
	var out []string
	for _, m := range *assertions.Annotations_FromStack(st.Stack).FindInfo(jsii.String("*"),
		assertions.Match_StringLikeRegexp(jsii.String(".*archive keeps every published event.*"))) {
		out = append(out, fmt.Sprint(m.Entry.Data))
	}
	return out
}

// GIVEN the default stack (365 days), the custom one (30 days), one that
// keeps the archive forever and one without an archive
// WHEN the archive's retention and the synth messages are read
// THEN the archive keeps events for the setting's days (none: 0, forever),
// and synth says, once, that the archive keeps personal data (customer_id,
// cancellation reasons) that long, that no single event can be erased from
// it, the setting that changes it and where the erasure procedure is
// (docs/ARCHIVE.md); without an archive it says nothing.
func TestArchiveRetentionOfPersonalDataIsStated(t *testing.T) {
	build := func(name string, days int) (*OrdersStack, *synthesized) {
		t.Helper()
		st, err := NewOrdersStack(awscdk.NewApp(nil), name, OrdersStackProps{AssetRoot: assetRoot, Outbox: outboxcdk.Props{ArchiveRetentionDays: days}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := synth(st)
		if err != nil {
			t.Fatal(err)
		}
		return st, s
	}
	forever, fs := build("Forever", outboxcdk.KeepArchiveForever)
	none, ns := build("NoArchive", outboxcdk.NoArchive)
	for _, c := range []struct {
		st   *OrdersStack
		s    *synthesized
		days any // RetentionDays in the template
		want string
	}{
		{def.stack, def, float64(365), "for 365 days"},
		{custom.stack, custom, float64(30), "for 30 days"},
		{forever, fs, float64(0), "forever"}, // RetentionDays 0: kept indefinitely
	} {
		name := *c.st.StackName()
		if got := c.s.props(t, c.s.ofType("AWS::Events::Archive")[0])["RetentionDays"]; got != c.days {
			t.Errorf("%s: archive RetentionDays = %v, want %v", name, got, c.days)
		}
		notes := archiveNotes(c.st)
		if len(notes) != 1 {
			t.Errorf("%s: %d synth notes about the archive's personal data, want 1", name, len(notes))
			continue
		}
		for _, part := range []string{c.want, "customer_id", "cancellation reasons", "ddb-outbox:archiveRetentionDays", "docs/ARCHIVE.md", "cannot erase"} {
			if !strings.Contains(notes[0], part) {
				t.Errorf("%s: archive note %q does not say %q", name, notes[0], part)
			}
		}
	}
	if n := len(ns.ofType("AWS::Events::Archive")); n != 0 || len(archiveNotes(none)) != 0 {
		t.Errorf("no archive: %d archives, notes %v", n, archiveNotes(none))
	}
}
