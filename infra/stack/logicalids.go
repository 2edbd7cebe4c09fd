package stack

import (
	"crypto/md5" //nolint:gosec // the CDK's logical id hash, not a security use
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/ddb-outbox/ddb-outbox/infra/outboxcdk"
)

// keepLogicalIDs gives every CloudFormation resource under consumer
// construct oc the logical id it had before the stack built its consumers
// with outboxcdk.NewConsumer, when each part was a child of the stack: a
// queue, rule or DLQ whose logical id changes is replaced on deploy (a new
// empty queue; the old one, with its dead letters, left behind). legacy
// maps the construct's child ids (outboxcdk.Consumer's "Queue", "DLQ",
// "Rule", ...) to their former ids under the stack; a child not in it
// keeps its new id. The event source mappings (children of the functions,
// named after the queue's construct path) get new ids: they hold no state.
func keepLogicalIDs(st awscdk.Stack, oc *outboxcdk.Consumer, legacy map[string]string) {
	prefix := *oc.Node().Path() + "/"
	for _, n := range *oc.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		el, ok := n.(awscdk.CfnElement)
		if !ok || !*awscdk.CfnElement_IsCfnElement(n) {
			continue
		}
		rel, ok := strings.CutPrefix(*n.Node().Path(), prefix)
		if !ok {
			continue
		}
		parts := strings.Split(rel, "/")
		old, ok := legacy[parts[0]]
		if !ok {
			continue
		}
		el.OverrideLogicalId(jsii.String(stackLogicalID(append([]string{old}, parts[1:]...))))
	}
}

// stackLogicalID is the logical id the CDK gives an element at path
// components (relative to its stack): its makeUniqueId (aws-cdk-lib
// core/lib/private/uniqueid.ts) — "Default" components dropped; one
// component alone is its own id; else the human part (consecutive
// duplicates removed, "Resource" dropped, non-alphanumerics removed,
// joined, at most 247 characters) and the first 8 hex digits, upper case,
// of the MD5 of the components joined by "/".
func stackLogicalID(components []string) string {
	var path []string
	for _, c := range components {
		if c != "Default" {
			path = append(path, c)
		}
	}
	if len(path) == 1 {
		if id := nonAlnum.ReplaceAllString(path[0], ""); len(id) <= 255 {
			return id
		}
	}
	sum := md5.Sum([]byte(strings.Join(path, "/"))) //nolint:gosec // see the import
	hash := strings.ToUpper(hex.EncodeToString(sum[:]))[:8]
	var human strings.Builder
	for i, c := range path {
		if (i > 0 && path[i-1] == c) || c == "Resource" {
			continue
		}
		human.WriteString(nonAlnum.ReplaceAllString(c, ""))
	}
	h := human.String()
	if len(h) > 255-8 {
		h = h[:255-8]
	}
	return h + hash
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)
