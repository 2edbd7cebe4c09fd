package localstate_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddb-outbox/ddb-outbox/internal/localstate"
	"github.com/ddb-outbox/ddb-outbox/pkg/dynoxide"
)

// BenchmarkStateWrite is the choice of where the local queues keep their
// messages, measured: one 1.5 KB message record written per operation to
// the journal file, or as an item to a table of the DynamoDB-compatible
// server (Dynoxide in memory, and with a data file as `make dev -data`
// runs it). Every queue change on the hot path is one such write.
func BenchmarkStateWrite(b *testing.B) {
	value := []byte(`{"body":"` + strings.Repeat("x", 1500) + `"}`)
	b.Run("journal", func(b *testing.B) {
		j, err := localstate.Open(filepath.Join(b.TempDir(), "state"), localstate.Options{Binding: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		i := 0
		for b.Loop() {
			i++
			if err := j.Put("sqs/q/"+strconv.Itoa(i%1000), value); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []string{"dynoxide-memory", "dynoxide-datafile"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			opts := dynoxide.Options{}
			if mode == "dynoxide-datafile" {
				opts.DBPath = filepath.Join(b.TempDir(), "dev.db")
			}
			srv, err := dynoxide.StartWith(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			ddb := dynamodb.NewFromConfig(dynoxide.AWSConfig(srv.Endpoint))
			table := aws.String("local-queues")
			if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: table, BillingMode: types.BillingModePayPerRequest,
				AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
				KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}}}); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: "sqs/q/" + strconv.Itoa(i%1000)},
					"v":  &types.AttributeValueMemberB{Value: value},
				}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
