package cdkapp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
	"github.com/ddb-outbox/ddb-outbox/pkg/outbox"
)

// The stack synthesizes (jsii runs the CDK under node) with the construct's
// table keyed as the library writes it and both of its functions.
func TestStackHasTheOutbox(t *testing.T) {
	assets := t.TempDir()
	for _, fn := range []string{outboxcdk.RelayFunction, outboxcdk.ReconcilerFunction} {
		if err := os.MkdirAll(filepath.Join(assets, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(assets, fn, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil { //nolint:gosec // a placeholder executable
			t.Fatal(err)
		}
	}
	stack, _, err := NewStack(awscdk.NewApp(nil), "Wallet", assets)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(*assertions.Template_FromStack(stack, nil).ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var keys []any
	for _, r := range doc.Resources {
		count[r.Type]++
		if r.Type == "AWS::DynamoDB::Table" {
			keys, _ = r.Properties["KeySchema"].([]any)
		}
	}
	if count["AWS::DynamoDB::Table"] != 1 || count["AWS::Lambda::Function"] < 2 || count["AWS::Lambda::EventSourceMapping"] != 1 {
		t.Fatalf("resources by type = %v", count)
	}
	if len(keys) != 2 || keys[0].(map[string]any)["AttributeName"] != outbox.AttrPK || keys[1].(map[string]any)["AttributeName"] != outbox.AttrSK {
		t.Fatalf("table key schema = %v", keys)
	}
}
