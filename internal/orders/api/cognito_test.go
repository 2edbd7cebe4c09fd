package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ddb-outbox/ddb-outbox/internal/orders/api"
	"github.com/ddb-outbox/ddb-outbox/internal/orders/order"
	"github.com/ddb-outbox/ddb-outbox/pkg/ddbtest"
)

// cognitoRequest is the Cognito identity pool request of the fixture
// (testdata/apigw_v2_cognito_identity.json: the HTTP API IAM authorizer
// context of a caller signing with identity pool credentials, whose userArn
// is the pool role's session "…/CognitoIdentityCredentials", shared by every
// user of the pool) as the user identityID, with idempotency key key and
// body.
func cognitoRequest(t *testing.T, identityID, key, body string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	req := loadEvent(t, "testdata/apigw_v2_cognito_identity.json")
	req.RequestContext.Authorizer.IAM.CognitoIdentity.IdentityID = identityID
	req.Headers["idempotency-key"] = key
	req.Body = body
	return req
}

// TestCognitoIdentityPoolUsersAreSeparateCallers: users of one Cognito
// identity pool sign with credentials of the same role session
// (requestContext.authorizer.iam.userArn
// "arn:aws:sts::<account>:assumed-role/<pool role>/CognitoIdentityCredentials"),
// told apart only by cognitoIdentity.identityId. Each identity is its own
// caller: user B sending user A's body with A's Idempotency-Key gets an
// order of its own (the report: B got A's order), B reusing the key for
// another body is not refused for A's, A's retry still gets A's order, and
// the actor recorded is the identity, not the shared role. A request of
// that role session without an identity id cannot be told apart from the
// pool's other users: it is refused 401.
func TestCognitoIdentityPoolUsersAreSeparateCallers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ddbtest.New(t))
	handle := api.LambdaHandler(f.h)
	ctx := context.Background()
	const (
		userA = "eu-west-1:0a1b2c3d-0000-4000-8000-00000000000a"
		userB = "eu-west-1:0a1b2c3d-0000-4000-8000-00000000000b"
		pool  = "eu-west-1:9f8e7d6c-0000-4000-8000-000000000001"
	)
	decode := func(r events.APIGatewayV2HTTPResponse) order.Order {
		t.Helper()
		var o order.Order
		if err := json.Unmarshal([]byte(r.Body), &o); err != nil {
			t.Fatalf("%d %s: %v", r.StatusCode, r.Body, err)
		}
		return o
	}
	a, err := handle(ctx, cognitoRequest(t, userA, "k-1", bodyA))
	if err != nil || a.StatusCode != http.StatusCreated {
		t.Fatalf("A create: %v %d %s", err, a.StatusCode, a.Body)
	}
	orderA := decode(a)

	b, err := handle(ctx, cognitoRequest(t, userB, "k-1", bodyA))
	if err != nil || b.StatusCode != http.StatusCreated {
		t.Fatalf("B with A's body and key: %v %d %s; want 201 and an order of B's own", err, b.StatusCode, b.Body)
	}
	if orderB := decode(b); orderB.ID == orderA.ID {
		t.Fatalf("B received A's order %s", orderA.ID)
	}
	if r, _ := handle(ctx, cognitoRequest(t, userB, "k-2", bodyA)); r.StatusCode != http.StatusCreated {
		t.Fatalf("B's own key: %d %s", r.StatusCode, r.Body)
	}
	if r, _ := handle(ctx, cognitoRequest(t, userB, "k-1", bodyB)); r.StatusCode == http.StatusCreated || r.StatusCode == http.StatusOK {
		t.Fatalf("B reusing its own key for another body: %d %s; want it refused", r.StatusCode, r.Body)
	}
	if r, _ := handle(ctx, cognitoRequest(t, userA, "k-1", bodyA)); r.StatusCode != http.StatusOK || decode(r).ID != orderA.ID {
		t.Fatalf("A's retry: %d %s; want A's order", r.StatusCode, r.Body)
	}

	// The actor is the identity (pool and identity id), on the order and in
	// the event; it passes order.ValidateActor.
	want := "cognito-identity:" + pool + "/" + userA
	recs := f.records(t, orderA.ID)
	if len(recs) != 1 || recs[0].Envelope.Actor != want {
		t.Fatalf("outbox %+v, want actor %s", recs, want)
	}

	// The pool role's session without an identity id: refused, nothing written.
	before := f.counts(t)
	for name, edit := range map[string]func(*events.APIGatewayV2HTTPRequest){
		"no cognitoIdentity": func(r *events.APIGatewayV2HTTPRequest) {
			r.RequestContext.Authorizer.IAM.CognitoIdentity = events.APIGatewayV2HTTPRequestContextAuthorizerCognitoIdentity{}
		},
		"identity id not of Cognito's form": func(r *events.APIGatewayV2HTTPRequest) {
			r.RequestContext.Authorizer.IAM.CognitoIdentity.IdentityID = "eu-west-1:../admin"
		},
		"pool id missing": func(r *events.APIGatewayV2HTTPRequest) {
			r.RequestContext.Authorizer.IAM.CognitoIdentity.IdentityPoolID = ""
		},
	} {
		req := cognitoRequest(t, userA, "k-9", bodyA)
		edit(&req)
		r, err := handle(ctx, req)
		if err != nil || r.StatusCode != http.StatusUnauthorized || !strings.Contains(r.Body, api.CodeUnauthenticated) {
			t.Errorf("%s: %v %d %s; want 401 unauthenticated", name, err, r.StatusCode, r.Body)
		}
	}
	if after := f.counts(t); after != before {
		t.Fatalf("refused requests wrote: %+v -> %+v", before, after)
	}
}
