package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Multi-Region settings (issue 34, docs/MULTI-REGION.md).
const (
	// EnvRegions lists the Regions of the outbox's global table (DynamoDB
	// global tables version 2019.11.21, multi-Region eventual
	// consistency), comma-separated, e.g. "eu-west-1,eu-central-1". Unset
	// or empty: single-Region mode, where nothing below applies. Set: the
	// writer stamps every outbox record with its origin Region, the relay
	// publishes only its own Region's records, the reconciler sweeps only
	// its own Region's pending shards, and every aggregate has a home
	// Region that alone accepts its writes. The CDK construct sets it on
	// every outbox function of a multi-Region deployment.
	EnvRegions = "OUTBOX_REGIONS"
	// EnvAWSRegion is the Region the function runs in. Lambda sets it in
	// every function ("Defined runtime environment variables", Lambda
	// developer guide); locally the local stack sets it per simulated
	// Region.
	EnvAWSRegion = "AWS_REGION"
)

// regionName is the shape of an AWS Region code: a prefix of two to four
// letters, one or more words and a number ("eu-west-1", "us-gov-west-1",
// "ap-southeast-4", "eusc-de-east-1" of the AWS European Sovereign Cloud).
var regionName = regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}$`)

// MaxRegionNameLen bounds a Region name, in bytes. AWS Region codes are
// under 20 characters; the bound keeps every key that embeds a Region
// (pending shard "<region>#pNN", takeover "<failed>#<survivor>", takeover
// mark "takeover#<failed>#mark" / "<survivor>#<event_id>", heartbeat
// "heartbeat#<region>") far inside DynamoDB's key limits (partition key
// 2,048 bytes, sort key 1,024 bytes: developer guide, Service, account,
// and table quotas), which the shape alone does not bound.
const MaxRegionNameLen = 32

// ValidRegionName returns an error when name is not shaped like an AWS
// Region code (lower-case words joined by hyphens, ending in a number:
// "eu-west-1") or is longer than MaxRegionNameLen bytes. It does not check
// that the Region exists.
func ValidRegionName(name string) error {
	if len(name) > MaxRegionNameLen {
		return fmt.Errorf("config: Region name %.40q… is %d bytes, longer than any AWS Region code (limit %d)", name, len(name), MaxRegionNameLen)
	}
	if !regionName.MatchString(name) {
		return fmt.Errorf("config: %q is not an AWS Region name (want e.g. eu-west-1)", name)
	}
	return nil
}

// ParseRegions parses a comma-separated Region list (EnvRegions' format).
// It returns nil for an empty string, and an error when an entry is empty,
// is not a Region name (ValidRegionName), or appears twice, or when the list
// names a single Region (a global table has at least two).
func ParseRegions(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	seen := make(map[string]bool, len(parts))
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		switch {
		case p == "":
			return nil, fmt.Errorf("config: %s=%q: entry %d is empty (a stray comma?)", EnvRegions, s, i+1)
		case strings.TrimSpace(p) != p:
			return nil, fmt.Errorf("config: %s=%q: entry %q has spaces around it; write the list without spaces, e.g. eu-west-1,eu-central-1", EnvRegions, s, p)
		}
		if err := ValidRegionName(p); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", EnvRegions, s, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("config: %s=%q names %s twice", EnvRegions, s, p)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("config: %s=%q names one Region: a global table has two or more (unset it for single-Region mode)", EnvRegions, s)
	}
	return out, nil
}

// RegionsFromEnv returns the Regions of EnvRegions (nil in single-Region
// mode), or ParseRegions' error.
func RegionsFromEnv() ([]string, error) {
	return ParseRegions(os.Getenv(EnvRegions))
}

// RegionFromEnv returns the Region this function writes and publishes for
// in multi-Region mode: EnvAWSRegion, which must be one of EnvRegions. It
// returns "" and no error in single-Region mode (EnvRegions unset or
// empty). Errors: EnvRegions malformed (ParseRegions), EnvAWSRegion unset,
// or EnvAWSRegion not in the list.
func RegionFromEnv() (string, error) {
	regions, err := RegionsFromEnv()
	if err != nil || regions == nil {
		return "", err
	}
	here, err := Required(EnvAWSRegion)
	if err != nil {
		return "", fmt.Errorf("config: %s is set, so %s must name this function's Region: %w", EnvRegions, EnvAWSRegion, err)
	}
	for _, r := range regions {
		if r == here {
			return here, nil
		}
	}
	return "", fmt.Errorf("config: %s=%q is not one of %s=%q", EnvAWSRegion, here, EnvRegions, strings.Join(regions, ","))
}
