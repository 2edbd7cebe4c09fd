// Command cdk is the wallet's CDK app (NewWalletStack). Synthesize it with
// `npx cdk synth` in this directory after building the functions into
// ../dist (`make build` in examples/wallet); no AWS call is made.
//
// Context: wallet:assetRoot (default ../dist), wallet:eventSource (default
// com.example.wallet), wallet:destroy (true: tables and log groups are
// deleted with the stack), wallet:nag (default true: cdk-nag's
// AwsSolutions checks).
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	str := func(key, def string) string {
		switch v := app.Node().TryGetContext(jsii.String(key)).(type) {
		case string:
			if v != "" {
				return v
			}
		case bool: // a JSON boolean in cdk.json
			return fmt.Sprint(v)
		}
		return def
	}
	props := WalletStackProps{
		AssetRoot:   str("wallet:assetRoot", "../dist"),
		EventSource: str("wallet:eventSource", "com.example.wallet"),
	}
	// The account and region of the CLI's credentials when it has some
	// (cdk deploy); environment-agnostic otherwise (a synth without any).
	if acct, region := os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION"); acct != "" && region != "" {
		props.Env = &awscdk.Environment{Account: jsii.String(acct), Region: jsii.String(region)}
	}
	if str("wallet:destroy", "false") == "true" {
		props.RemovalPolicy = awscdk.RemovalPolicy_DESTROY
	}
	if _, err := NewWalletStack(app, "Wallet", props); err != nil {
		fmt.Fprintln(os.Stderr, "wallet:", err)
		os.Exit(1)
	}
	if str("wallet:nag", "true") == "true" {
		awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{}), nil)
	}
	app.Synth(nil)
}
