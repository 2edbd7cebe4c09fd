package stack

import (
	"slices"
	"testing"
)

// Issue 32 item 3 (a): what the customer managed key covers.

// GIVEN the custom stack (CustomerManagedKey) and the default stack
// WHEN the log groups, the functions and the key policy are read
// THEN with the key every log group (each function's and the API's access
// log) is encrypted with it (KmsKeyId) and every function's environment
// too (KmsKeyArn), and the key policy lets CloudWatch Logs of this region
// use it only for log groups of this account and region: AWS's documented
// statement (CloudWatch Logs user guide, encrypt-log-data-kms: principal
// logs.<region>.amazonaws.com, kms:Encrypt*, kms:Decrypt*,
// kms:ReEncrypt*, kms:GenerateDataKey*, kms:Describe*, condition ArnLike
// kms:EncryptionContext:aws:logs:arn arn:<partition>:logs:<region>:<account>:log-group:*);
// without a key nothing names one (CloudWatch Logs' own encryption, Lambda's
// AWS managed key).
func TestCustomerManagedKeyCoversLogsAndEnvironments(t *testing.T) {
	key := custom.ofType("AWS::KMS::Key")[0]
	keyArn := getAtt(key, "Arn")
	groups := custom.ofType("AWS::Logs::LogGroup")
	if len(groups) < 7 { // six functions and the API's access log
		t.Fatalf("custom: %d log groups, want at least 7", len(groups))
	}
	for _, id := range groups {
		if got := custom.props(t, id)["KmsKeyId"]; !jsonEqual(t, got, keyArn) {
			t.Errorf("custom log group %s KmsKeyId = %v, want the stack key", id, got)
		}
	}
	for _, id := range custom.ofType("AWS::Lambda::Function") {
		if got := custom.props(t, id)["KmsKeyArn"]; !jsonEqual(t, got, keyArn) {
			t.Errorf("custom function %s KmsKeyArn = %v, want the stack key (its environment)", id, got)
		}
	}
	var logs []any
	for _, st := range policyStatements(custom.props(t, key)["KeyPolicy"]) {
		if mentions(t, get(st, "Principal"), "logs.") {
			logs = append(logs, st)
		}
	}
	if len(logs) != 1 {
		t.Fatalf("custom key policy: %d statements for CloudWatch Logs, want 1: %v", len(logs), normalize(t, logs))
	}
	st := logs[0]
	if p := get(st, "Principal", "Service"); !mentions(t, p, "logs.") || !mentions(t, p, "AWS::Region") || !mentions(t, p, ".amazonaws.com") {
		t.Errorf("CloudWatch Logs principal = %v, want logs.<region>.amazonaws.com", normalize(t, p))
	}
	got := sortedActions(toStrings(strs(get(st, "Action"))))
	if want := sortedActions([]string{"kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"}); !slices.Equal(got, want) {
		t.Errorf("CloudWatch Logs key actions = %v, want AWS's documented %v", got, want)
	}
	cond := get(st, "Condition", "ArnLike", "kms:EncryptionContext:aws:logs:arn")
	for _, part := range []string{":logs:", "AWS::Partition", "AWS::Region", "AWS::AccountId", ":log-group:*"} {
		if !mentions(t, cond, part) {
			t.Errorf("CloudWatch Logs key condition = %v, want kms:EncryptionContext:aws:logs:arn like arn:<partition>:logs:<region>:<account>:log-group:* (missing %q)",
				normalize(t, get(st, "Condition")), part)
		}
	}
	for _, id := range def.ofType("AWS::Logs::LogGroup") {
		if k := def.props(t, id)["KmsKeyId"]; k != nil {
			t.Errorf("default log group %s KmsKeyId = %v, want none", id, k)
		}
	}
	for _, id := range def.ofType("AWS::Lambda::Function") {
		if k := def.props(t, id)["KmsKeyArn"]; k != nil {
			t.Errorf("default function %s KmsKeyArn = %v, want none", id, k)
		}
	}
}
