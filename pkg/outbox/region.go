package outbox

// Multi-Region names (issue 34, docs/MULTI-REGION.md). In single-Region mode
// (an empty region) every function here returns the single-Region value, so
// a table written before multi-Region mode keeps its keys and shards.
//
// The rule these names serve: under global tables' last-writer-wins no item
// of the outbox table has two writing Regions. An outbox record and its
// status belong to its origin Region; an aggregate's home item to its home
// Region; takeover items and takeover marks to the surviving Region that
// wrote them.

// Attribute names of multi-Region mode.
const (
	// AttrOriginRegion (S) is the Region whose writer committed the
	// record, stamped in the business transaction. A stream record's own
	// awsRegion is the reader's Region and 2019.11.21 global tables add no
	// aws:rep:* attributes, so the item must say where it was written.
	AttrOriginRegion = "origin_region"
	// AttrRedriveGeneration (N) counts the origin Region's redrives of a
	// record; a redrive is conditioned on the value it read.
	AttrRedriveGeneration = "redrive_generation"
	// AttrHomeRegion (S) is the Region an aggregate's home item names.
	AttrHomeRegion = "home_region"
)

// HomeSK is the sort key of an aggregate's home item; an outbox record's
// sort key is always digits (KeyFor), so the two never collide.
const HomeSK = "home"

// HomeKeyPrefix begins the partition key of an aggregate's home item:
// "home#<aggregate_type>#<aggregate_id>".
const HomeKeyPrefix = "home#"

// HomeKey returns the key of the item naming an aggregate's home Region.
func HomeKey(aggregateType, aggregateID string) Key {
	return Key{PK: HomeKeyPrefix + aggregateType + "#" + aggregateID, SK: HomeSK}
}

// RegionShardName returns the pending index partition value of shard i of a
// Region's records: "<region>#pNN", or ShardName(i) when region is empty.
func RegionShardName(region string, i int) string {
	if region == "" {
		return ShardName(i)
	}
	return region + "#" + ShardName(i)
}

// PendingShardIn returns the pending index partition value of an event
// written in region: RegionShardName(region, FNV-1a(eventID) mod shards),
// or PendingShard(eventID, shards) when region is empty.
func PendingShardIn(region, eventID string, shards int) string {
	s := PendingShard(eventID, shards)
	if region == "" {
		return s
	}
	return region + "#" + s
}

// StreamFilterPatternIn returns the event source mapping filter of the relay
// in region: StreamFilterPattern plus the record's origin Region, so a
// replica's relay never sees the records replicated into its stream ("Each
// global table produces an independent stream based on all its writes,
// regardless of the origination point", DynamoDB developer guide, global
// tables How it works). An empty region returns StreamFilterPattern().
// The relay checks the origin again in its handler (relay.Config.Region).
func StreamFilterPatternIn(region string) map[string]any {
	p := StreamFilterPattern()
	if region == "" {
		return p
	}
	img := p["dynamodb"].(map[string]any)["NewImage"].(map[string]any)
	img[AttrOriginRegion] = map[string]any{"S": []any{region}}
	return p
}
