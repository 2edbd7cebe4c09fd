package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// Issue 32 item 8: the README's alarm count and cost come from the template.

// alarmMonthUSD is the price of one standard-resolution CloudWatch alarm
// metric for a month in us-east-1, US dollars (https://aws.amazon.com/cloudwatch/pricing/,
// "Alarm Metrics", Standard Resolution (60 sec): $0.10 per alarm metric;
// the first 10 a month are in the free tier, which the README's figure
// leaves out). ❓ The pricing page kept here does not say how an alarm on a
// metric math expression is counted; the two API rate alarms read two
// metrics each and may be billed as two alarm metrics each.
const alarmMonthUSD = 0.10

// GIVEN the default template
// WHEN its AWS::CloudWatch::Alarm resources are counted
// THEN docs/DEPLOY.md's idle cost line states that count and
// count × alarmMonthUSD, rounded to cents ("N CloudWatch alarms (~$0.10
// each, ~$X.YZ)"), and infra/README.md states the count ("N with the
// defaults").
func TestREADMEStatesTheTemplatesAlarms(t *testing.T) {
	n := len(def.ofType("AWS::CloudWatch::Alarm"))
	if n == 0 {
		t.Fatal("no alarms in the default template")
	}
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cost := regexp.MustCompile(`(\d+) CloudWatch alarms \(~\$([0-9.]+) each, ~\$([0-9.]+)\)`)
	m := cost.FindStringSubmatch(read("docs/DEPLOY.md"))
	if m == nil {
		t.Fatalf("docs/DEPLOY.md has no line %q", cost)
	}
	if got, _ := strconv.Atoi(m[1]); got != n {
		t.Errorf("docs/DEPLOY.md says %d CloudWatch alarms, the default template has %d", got, n)
	}
	if m[2] != strconv.FormatFloat(alarmMonthUSD, 'f', 2, 64) {
		t.Errorf("docs/DEPLOY.md prices an alarm at $%s a month, want $%.2f", m[2], alarmMonthUSD)
	}
	if want := fmt.Sprintf("%.2f", float64(n)*alarmMonthUSD); m[3] != want {
		t.Errorf("docs/DEPLOY.md says ~$%s a month for the alarms, want %d × $%.2f = $%s", m[3], n, alarmMonthUSD, want)
	}
	infra := regexp.MustCompile(`\((\d+) with the defaults\)`)
	if m := infra.FindStringSubmatch(read("infra/README.md")); m == nil {
		t.Errorf("infra/README.md does not state the alarm count (%q)", infra)
	} else if got, _ := strconv.Atoi(m[1]); got != n {
		t.Errorf("infra/README.md says %d alarms, the default template has %d", got, n)
	}
}
