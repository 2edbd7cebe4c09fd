package mrec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// TTL deletes are stream records whose userIdentity is this principal
// (DynamoDB Streams API, Identity; "Expiring items by using DynamoDB TTL").
const (
	ttlIdentityType      = "Service"
	ttlIdentityPrincipal = "dynamodb.amazonaws.com"
)

// absent is the hash of "no item".
const absent uint64 = 0

// write is one stream record turned into the write that replicates it: a
// put of the new image, or a plain delete (image nil). It has no
// userIdentity: a replicated TTL delete is an ordinary delete.
type write struct {
	table  string
	key    map[string]ddbtypes.AttributeValue
	keyStr string // canonical encoding of key
	image  map[string]ddbtypes.AttributeValue
	hash   uint64 // imageHash(image)
	seq    string // sequence number in the source stream
	ttl    bool   // the source record was a TTL delete (statistics only)
}

func (w write) isDelete() bool { return w.image == nil }

// errNoImage: an INSERT/MODIFY record without NewImage (a KEYS_ONLY or
// OLD_IMAGE stream, which Start refuses).
var errNoImage = errors.New("stream record has no NewImage (stream view type must be NEW_IMAGE or NEW_AND_OLD_IMAGES)")

// recordToWrite maps a stream record of table to its replicating write.
// INSERT and MODIFY become a put of NewImage; REMOVE (including a TTL
// delete) becomes a delete of Keys.
func recordToWrite(table string, r streamtypes.Record) (write, error) {
	if r.Dynamodb == nil || len(r.Dynamodb.Keys) == 0 {
		return write{}, errors.New("stream record has no Keys")
	}
	w := write{table: table, seq: aws.ToString(r.Dynamodb.SequenceNumber)}
	var err error
	if w.key, err = convertMap(r.Dynamodb.Keys); err != nil {
		return write{}, fmt.Errorf("keys: %w", err)
	}
	w.keyStr = string(canonMap(nil, w.key))
	switch r.EventName {
	case streamtypes.OperationTypeInsert, streamtypes.OperationTypeModify:
		if len(r.Dynamodb.NewImage) == 0 {
			return write{}, errNoImage
		}
		if w.image, err = convertMap(r.Dynamodb.NewImage); err != nil {
			return write{}, fmt.Errorf("new image: %w", err)
		}
	case streamtypes.OperationTypeRemove:
		w.ttl = r.UserIdentity != nil &&
			aws.ToString(r.UserIdentity.Type) == ttlIdentityType &&
			aws.ToString(r.UserIdentity.PrincipalId) == ttlIdentityPrincipal
	default:
		return write{}, fmt.Errorf("unknown eventName %q", r.EventName)
	}
	w.hash = imageHash(w.image)
	return w, nil
}

// convertMap converts a Streams attribute map to a DynamoDB one.
func convertMap(m map[string]streamtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	out := make(map[string]ddbtypes.AttributeValue, len(m))
	for k, v := range m {
		c, err := convert(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = c
	}
	return out, nil
}

func convert(v streamtypes.AttributeValue) (ddbtypes.AttributeValue, error) {
	switch v := v.(type) {
	case *streamtypes.AttributeValueMemberS:
		return &ddbtypes.AttributeValueMemberS{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberN:
		return &ddbtypes.AttributeValueMemberN{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberB:
		return &ddbtypes.AttributeValueMemberB{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberBOOL:
		return &ddbtypes.AttributeValueMemberBOOL{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberNULL:
		return &ddbtypes.AttributeValueMemberNULL{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberSS:
		return &ddbtypes.AttributeValueMemberSS{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberNS:
		return &ddbtypes.AttributeValueMemberNS{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberBS:
		return &ddbtypes.AttributeValueMemberBS{Value: v.Value}, nil
	case *streamtypes.AttributeValueMemberL:
		out := make([]ddbtypes.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			c, err := convert(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return &ddbtypes.AttributeValueMemberL{Value: out}, nil
	case *streamtypes.AttributeValueMemberM:
		m, err := convertMap(v.Value)
		if err != nil {
			return nil, err
		}
		return &ddbtypes.AttributeValueMemberM{Value: m}, nil
	default:
		return nil, fmt.Errorf("unsupported attribute value %T", v)
	}
}

// imageHash hashes the canonical encoding of an item (absent for nil).
// Map keys and set members are sorted, so equal items hash equally
// whatever order the server returns them in.
func imageHash(item map[string]ddbtypes.AttributeValue) uint64 {
	if item == nil {
		return absent
	}
	h := fnv.New64a()
	h.Write(canonMap([]byte{'I'}, item))
	if s := h.Sum64(); s != absent {
		return s
	}
	return 1
}

func canonMap(b []byte, m map[string]ddbtypes.AttributeValue) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.AppendUvarint(append(b, '{'), uint64(len(keys)))
	for _, k := range keys {
		b = canonStr(b, k)
		b = canon(b, m[k])
	}
	return b
}

// canonNumber spells a DynamoDB number one way ("1.0", "01" and "1E0" are
// one number): DynamoDB numbers have up to 38 significant digits, well
// within a 256-bit mantissa. A string that is not a number is kept.
func canonNumber(n string) string {
	f, _, err := big.ParseFloat(n, 10, 256, big.ToNearestEven)
	if err != nil {
		return n
	}
	return f.Text('g', 40)
}

func canonStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func canonStrs(b []byte, tag byte, ss []string) []byte {
	s := append([]string(nil), ss...)
	sort.Strings(s)
	b = binary.AppendUvarint(append(b, tag), uint64(len(s)))
	for _, e := range s {
		b = canonStr(b, e)
	}
	return b
}

func canon(b []byte, v ddbtypes.AttributeValue) []byte {
	switch v := v.(type) {
	case *ddbtypes.AttributeValueMemberS:
		return canonStr(append(b, 'S'), v.Value)
	case *ddbtypes.AttributeValueMemberN:
		return canonStr(append(b, 'N'), canonNumber(v.Value))
	case *ddbtypes.AttributeValueMemberB:
		return canonStr(append(b, 'B'), string(v.Value))
	case *ddbtypes.AttributeValueMemberBOOL:
		if v.Value {
			return append(b, 'T')
		}
		return append(b, 'F')
	case *ddbtypes.AttributeValueMemberNULL:
		return append(b, '0')
	case *ddbtypes.AttributeValueMemberSS:
		return canonStrs(b, 's', v.Value)
	case *ddbtypes.AttributeValueMemberNS:
		ns := make([]string, len(v.Value))
		for i, e := range v.Value {
			ns[i] = canonNumber(e)
		}
		return canonStrs(b, 'n', ns)
	case *ddbtypes.AttributeValueMemberBS:
		ss := make([]string, len(v.Value))
		for i, e := range v.Value {
			ss[i] = string(e)
		}
		return canonStrs(b, 'b', ss)
	case *ddbtypes.AttributeValueMemberL:
		b = binary.AppendUvarint(append(b, '['), uint64(len(v.Value)))
		for _, e := range v.Value {
			b = canon(b, e)
		}
		return b
	case *ddbtypes.AttributeValueMemberM:
		return canonMap(b, v.Value)
	default:
		return append(b, '?')
	}
}
