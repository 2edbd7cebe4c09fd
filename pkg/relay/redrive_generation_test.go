package relay_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
	"github.com/ddb-outbox/ddb-outbox/pkg/relay"
)

// TestRedriveGenerationHostile: the stored generation Redrive and Requeue
// read before bumping it. Absent or 0 reads 0; anything that is not a whole
// number, and the int64 maximum (whose bump, gen+1, would wrap to the
// minimum and leave a negative generation that every later read refuses),
// is an error, so nothing is written.
func TestRedriveGenerationHostile(t *testing.T) {
	t.Parallel()
	n := func(v string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{outbox.AttrRedriveGeneration: &types.AttributeValueMemberN{Value: v}}
	}
	cases := []struct {
		name string
		item map[string]types.AttributeValue
		want int64
		err  bool
	}{
		{"absent", map[string]types.AttributeValue{}, 0, false},
		{"zero", n("0"), 0, false},
		{"seven", n("7"), 7, false},
		{"one below the maximum", n("9223372036854775806"), 9223372036854775806, false},
		{"maximum: cannot be bumped", n("9223372036854775807"), 0, true},
		{"beyond int64", n("9223372036854775808"), 0, true},
		{"negative", n("-1"), 0, true},
		{"fraction", n("1.5"), 0, true},
		{"exponent", n("1e3"), 0, true},
		{"not a number", n("abc"), 0, true},
		{"a string", map[string]types.AttributeValue{outbox.AttrRedriveGeneration: &types.AttributeValueMemberS{Value: "1"}}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := relay.RedriveGeneration(c.item)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("RedriveGeneration = %d, %v; want %d, error %v", got, err, c.want, c.err)
			}
		})
	}
}
