package config

import (
	"strings"
	"testing"
)

func TestValidRegionName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"eu-west-1", "us-gov-west-1", "ap-southeast-4", "cn-north-1", "il-central-1", "eusc-de-east-1"} {
		if err := ValidRegionName(ok); err != nil {
			t.Errorf("ValidRegionName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "eu-west", "EU-WEST-1", "eu_west_1", " eu-west-1", "eu-west-1 ", "euwest1", "eu-west-123", "e-west-1", "eu--west-1", "eu-west-1#p00", "abcde-west-1",
		// Shaped like a Region but long enough to push a prefixed key
		// (takeover "<failed>#<survivor>", a 1,024-byte sort key) past
		// DynamoDB's limits.
		"eu-" + strings.Repeat("west", 200) + "-1", "eu-" + strings.Repeat("w", 28) + "-1" /* 33 bytes */} {
		if err := ValidRegionName(bad); err == nil {
			t.Errorf("ValidRegionName(%q) = nil, want an error", bad)
		}
	}
}

func TestParseRegions(t *testing.T) {
	t.Parallel()
	got, err := ParseRegions("eu-west-1,eu-central-1")
	if err != nil || len(got) != 2 || got[0] != "eu-west-1" || got[1] != "eu-central-1" {
		t.Fatalf("ParseRegions = %v, %v", got, err)
	}
	if got, err := ParseRegions(""); got != nil || err != nil {
		t.Fatalf("ParseRegions(\"\") = %v, %v; want nil, nil", got, err)
	}
	for _, bad := range []string{"eu-west-1", "eu-west-1,eu-west-1", "eu-west-1,", "eu-west-1, eu-central-1", "eu-west-1,nowhere"} {
		if _, err := ParseRegions(bad); err == nil {
			t.Errorf("ParseRegions(%q) = nil error", bad)
		}
	}
}

// TestParseRegionsMessages: each malformed list says what is wrong in one
// "config:" message: spaces, a stray comma, a bad name, a repeat.
func TestParseRegionsMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"eu-west-1, eu-central-1", "spaces"},
		{" eu-west-1,eu-central-1", "spaces"},
		{"eu-west-1,,eu-central-1", "entry 2 is empty"},
		{"eu-west-1,", "entry 2 is empty"},
		{"EU-WEST-1,eu-central-1", `"EU-WEST-1" is not an AWS Region name`},
		{"eu-west-1,eu-west-1", "names eu-west-1 twice"},
		{"eu-west-1", "names one Region"},
	} {
		_, err := ParseRegions(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "config:") != 1 {
			t.Errorf("ParseRegions(%q) = %v, want one message saying %q", c.in, err, c.want)
		}
	}
}

func TestRegionFromEnv(t *testing.T) {
	cases := []struct {
		regions, here, want, errHas string
	}{
		{"", "eu-west-1", "", ""},
		{"eu-west-1,eu-central-1", "eu-central-1", "eu-central-1", ""},
		{"eu-west-1,eu-central-1", "", "", "AWS_REGION"},
		{"eu-west-1,eu-central-1", "us-east-1", "", "not one of"},
		{"eu-west-1", "eu-west-1", "", "one Region"},
	}
	for _, c := range cases {
		t.Setenv(EnvRegions, c.regions)
		t.Setenv(EnvAWSRegion, c.here)
		got, err := RegionFromEnv()
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("%q/%q: err = %v, want one containing %q", c.regions, c.here, err, c.errHas)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q/%q: RegionFromEnv = %q, %v; want %q", c.regions, c.here, got, err, c.want)
		}
	}
}
