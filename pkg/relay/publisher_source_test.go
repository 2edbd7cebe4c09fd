package relay_test

import (
	"strings"
	"testing"

	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestPublisherNeedsItsSource: the library has no default event source.
func TestPublisherNeedsItsSource(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{"": "PublisherConfig.Source is required", "aws.x": `starts with "aws."`} {
		c := relay.PublisherConfig{EventBusName: "bus", Source: src}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Source %q: %v, want %q", src, err, want)
		}
	}
}
