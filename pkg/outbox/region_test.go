package outbox

import (
	"encoding/json"
	"testing"
)

func TestRegionNames(t *testing.T) {
	t.Parallel()
	if got := RegionShardName("", 3); got != "p03" {
		t.Errorf("RegionShardName(\"\", 3) = %q", got)
	}
	if got := RegionShardName("eu-west-1", 3); got != "eu-west-1#p03" {
		t.Errorf("RegionShardName(eu-west-1, 3) = %q", got)
	}
	id := "01J00000000000000000000000"
	if got, want := PendingShardIn("", id, 16), PendingShard(id, 16); got != want {
		t.Errorf("PendingShardIn(\"\") = %q, want %q", got, want)
	}
	if got, want := PendingShardIn("eu-central-1", id, 16), "eu-central-1#"+PendingShard(id, 16); got != want {
		t.Errorf("PendingShardIn(eu-central-1) = %q, want %q", got, want)
	}
	k := HomeKey("order", "o-1")
	if k.PK != "home#order#o-1" || k.SK != HomeSK {
		t.Errorf("HomeKey = %+v", k)
	}
	if rk := KeyFor("home", "order#o-1", 1, 0); rk == k {
		t.Errorf("a record key equals a home key: %+v", rk)
	}
}

func TestStreamFilterPatternIn(t *testing.T) {
	t.Parallel()
	single, _ := json.Marshal(StreamFilterPattern())
	if got, _ := json.Marshal(StreamFilterPatternIn("")); string(got) != string(single) {
		t.Errorf("StreamFilterPatternIn(\"\") = %s, want %s", got, single)
	}
	got, _ := json.Marshal(StreamFilterPatternIn("eu-west-1"))
	want := `{"dynamodb":{"NewImage":{"event_id":{"S":[{"exists":true}]},"origin_region":{"S":["eu-west-1"]}}},"eventName":["INSERT"]}`
	if string(got) != want {
		t.Errorf("StreamFilterPatternIn(eu-west-1) = %s\nwant %s", got, want)
	}
	// The single-Region pattern is not changed by building a Region's.
	if again, _ := json.Marshal(StreamFilterPattern()); string(again) != string(single) {
		t.Errorf("StreamFilterPattern changed: %s", again)
	}
}
