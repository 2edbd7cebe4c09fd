package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
	"github.com/ddb-outbox/ddb-outbox/pkg/idempotency"
)

// ChargeRequest is a plain handler's input: a direct invoke or an API
// request carrying the caller's idempotency key.
type ChargeRequest struct {
	RequestID   string `json:"request_id"`
	AmountMinor int64  `json:"amount_minor"`
}

// Receipt is the handler's result, stored and replayed as JSON.
type Receipt struct {
	ChargeID string `json:"charge_id"`
}

// Wrapping a plain Lambda handler: the second call with the same request_id
// gets the first receipt without charging again, and reusing the id for
// another amount is refused. In Lambda: lambda.Start(charge), with the Store
// built once per instance (outside the handler).
func ExampleWrap() {
	srv, err := dynoxide.Start(context.Background(), nil) // in AWS: dynamodb.NewFromConfig(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	if _, err := ddb.CreateTable(context.Background(), idempotency.CreateTableInput("idempotency")); err != nil {
		fmt.Println(err)
		return
	}
	store, err := idempotency.NewStore(ddb, idempotency.Config{
		Table: "idempotency", Namespace: "charge", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	charges := 0
	charge := idempotency.Wrap(store,
		func(r ChargeRequest) (string, error) { return r.RequestID, nil },
		func(ctx context.Context, r ChargeRequest) (Receipt, error) {
			charges++ // the external effect
			return Receipt{ChargeID: fmt.Sprintf("ch_%d", charges)}, nil
		})

	ctx := context.Background()
	r1, err := charge(ctx, ChargeRequest{RequestID: "req-1", AmountMinor: 1999})
	fmt.Println(r1.ChargeID, err)
	r2, err := charge(ctx, ChargeRequest{RequestID: "req-1", AmountMinor: 1999}) // a retry
	fmt.Println(r2.ChargeID, err)
	_, err = charge(ctx, ChargeRequest{RequestID: "req-1", AmountMinor: 5}) // a reused key
	fmt.Println(errors.Is(err, idempotency.ErrPayloadMismatch))
	_, err = charge(ctx, ChargeRequest{AmountMinor: 5}) // no key
	fmt.Println(errors.Is(err, idempotency.ErrNoKey))
	fmt.Println("charges:", charges, "replays:", store.Metrics().StoreHits)
	// Output:
	// ch_1 <nil>
	// ch_1 <nil>
	// true
	// true
	// charges: 1 replays: 1
}

// Do is the untyped core: a key, a payload hash and an effect returning the
// bytes to store.
func ExampleStore_Do() {
	srv, err := dynoxide.Start(context.Background(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
	if _, err := ddb.CreateTable(context.Background(), idempotency.CreateTableInput("idempotency")); err != nil {
		fmt.Println(err)
		return
	}
	store, err := idempotency.NewStore(ddb, idempotency.Config{Table: "idempotency", Namespace: "mailer", CacheSize: 128})
	if err != nil {
		fmt.Println(err)
		return
	}
	hash, _ := idempotency.HashJSON(map[string]string{"to": "a@example.com", "template": "paid"})
	send := func(ctx context.Context) ([]byte, error) { return []byte("msg-42"), nil }
	for range 3 {
		res, err := store.Do(context.Background(), "evt-7", hash, send)
		fmt.Println(string(res.Data), res.Source, err)
	}
	// Output:
	// msg-42 run <nil>
	// msg-42 cache <nil>
	// msg-42 cache <nil>
}
