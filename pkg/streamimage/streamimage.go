// Package streamimage converts the item images of a DynamoDB stream record,
// as Lambda delivers them (aws-lambda-go events.DynamoDBAttributeValue), into
// the AWS SDK for Go v2 attribute values (types.AttributeValue) that
// attributevalue and the outbox decoder understand, and into plain JSON.
//
// Part of the outbox library, the packages a team imports for its own tables
// (outbox, relay, reconciler, dedup, streamimage, idempotency); they never
// import the example orders application or the local tooling. The relay
// uses it to read stream records; see the example of ToJSON.
//
// # Invariants
//
//   - Lossless: every DynamoDB type is converted (S including "", N, B, SS, NS,
//     BS, M, L including empty ones, NULL, BOOL including false).
//   - Numbers stay the exact decimal text DynamoDB sent (up to 38 significant
//     digits); they never pass through float64 or int64.
//   - A value of an unknown or unsupported type is an error wrapping
//     ErrUnsupportedType, never a silent drop.
//
// Stream images use DynamoDB JSON ({"S":"x"}, {"N":"123"}); see
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_StreamRecord.html
//
// # Example
//
//	item, err := streamimage.ToAttributeValueMap(rec.Change.NewImage)
//	if err != nil { /* poison record: park it */ }
//	r, err := outbox.RecordFromItem(item)
package streamimage

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrUnsupportedType reports an attribute value whose type the converter does
// not know (or a zero/invalid events.DynamoDBAttributeValue).
var ErrUnsupportedType = errors.New("streamimage: unsupported attribute value type")

// ErrInvalidNumber reports an N or NS value that is not a decimal number, so
// it cannot be written as a JSON number.
var ErrInvalidNumber = errors.New("streamimage: invalid number")

// ToAttributeValueMap converts a stream image (Keys, NewImage or OldImage) to
// an SDK v2 item. A nil image returns a nil map. It returns an error wrapping
// ErrUnsupportedType, naming the attribute path, when any value cannot be
// converted.
func ToAttributeValueMap(image map[string]events.DynamoDBAttributeValue) (map[string]types.AttributeValue, error) {
	if image == nil {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(image))
	for _, k := range sortedKeys(image) {
		v, err := ToAttributeValue(image[k])
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// ToAttributeValue converts one stream attribute value to its SDK v2 form.
// Empty L, M, and empty strings are kept (as non-nil empty values). It returns
// an error wrapping ErrUnsupportedType for an unknown type or a zero value.
func ToAttributeValue(v events.DynamoDBAttributeValue) (out types.AttributeValue, err error) {
	// The events accessors panic on a type mismatch or a zero value; turn
	// that into an error rather than crash the handler.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: %v", ErrUnsupportedType, r)
		}
	}()
	switch v.DataType() {
	case events.DataTypeString:
		return &types.AttributeValueMemberS{Value: v.String()}, nil
	case events.DataTypeNumber:
		return &types.AttributeValueMemberN{Value: v.Number()}, nil
	case events.DataTypeBinary:
		b := v.Binary()
		if b == nil {
			// A zero events.DynamoDBAttributeValue reports DataTypeBinary with
			// no value; the JSON decoder always sets a non-nil slice.
			return nil, fmt.Errorf("%w: zero value", ErrUnsupportedType)
		}
		return &types.AttributeValueMemberB{Value: append([]byte{}, b...)}, nil
	case events.DataTypeBoolean:
		return &types.AttributeValueMemberBOOL{Value: v.Boolean()}, nil
	case events.DataTypeNull:
		return &types.AttributeValueMemberNULL{Value: true}, nil
	case events.DataTypeStringSet:
		return &types.AttributeValueMemberSS{Value: append([]string{}, v.StringSet()...)}, nil
	case events.DataTypeNumberSet:
		return &types.AttributeValueMemberNS{Value: append([]string{}, v.NumberSet()...)}, nil
	case events.DataTypeBinarySet:
		src := v.BinarySet()
		bs := make([][]byte, len(src))
		for i, b := range src {
			bs[i] = append([]byte{}, b...)
		}
		return &types.AttributeValueMemberBS{Value: bs}, nil
	case events.DataTypeList:
		src := v.List()
		l := make([]types.AttributeValue, len(src))
		for i, e := range src {
			c, err := ToAttributeValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = c
		}
		return &types.AttributeValueMemberL{Value: l}, nil
	case events.DataTypeMap:
		m, err := ToAttributeValueMap(v.Map())
		if err != nil {
			return nil, err
		}
		if m == nil {
			m = map[string]types.AttributeValue{}
		}
		return &types.AttributeValueMemberM{Value: m}, nil
	}
	return nil, fmt.Errorf("%w: data type %d", ErrUnsupportedType, v.DataType())
}

// FromAttributeValueMap converts an SDK v2 item to the stream image form
// Lambda delivers. Tests and local runtimes use it to build
// events.DynamoDBEvent records. It returns an error wrapping
// ErrUnsupportedType for an unknown member type.
func FromAttributeValueMap(item map[string]types.AttributeValue) (map[string]events.DynamoDBAttributeValue, error) {
	if item == nil {
		return nil, nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(item))
	for k, v := range item {
		c, err := FromAttributeValue(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = c
	}
	return out, nil
}

// FromAttributeValue converts one SDK v2 attribute value to the events form.
// It returns an error wrapping ErrUnsupportedType for an unknown member type
// (including *types.UnknownUnionMember) or nil.
func FromAttributeValue(v types.AttributeValue) (events.DynamoDBAttributeValue, error) {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(t.Value), nil
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(t.Value), nil
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(append([]byte{}, t.Value...)), nil
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(t.Value), nil
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute(), nil
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(append([]string{}, t.Value...)), nil
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(append([]string{}, t.Value...)), nil
	case *types.AttributeValueMemberBS:
		bs := make([][]byte, len(t.Value))
		for i, b := range t.Value {
			bs[i] = append([]byte{}, b...)
		}
		return events.NewBinarySetAttribute(bs), nil
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(t.Value))
		for i, e := range t.Value {
			c, err := FromAttributeValue(e)
			if err != nil {
				return events.DynamoDBAttributeValue{}, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = c
		}
		return events.NewListAttribute(l), nil
	case *types.AttributeValueMemberM:
		m, err := FromAttributeValueMap(t.Value)
		if err != nil {
			return events.DynamoDBAttributeValue{}, err
		}
		if m == nil {
			m = map[string]events.DynamoDBAttributeValue{}
		}
		return events.NewMapAttribute(m), nil
	}
	return events.DynamoDBAttributeValue{}, fmt.Errorf("%w: %T", ErrUnsupportedType, v)
}

// ToJSON renders a stream image as plain JSON (not DynamoDB JSON): S → string,
// N → JSON number with the exact digits DynamoDB sent (json.Number, so 38
// digits survive), B → base64 string, BOOL → true/false, NULL → null,
// L → array, M → object, SS/NS/BS → arrays. Keys are sorted. It returns an
// error wrapping ErrUnsupportedType or ErrInvalidNumber.
func ToJSON(image map[string]events.DynamoDBAttributeValue) ([]byte, error) {
	v, err := ToPlainMap(image)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("streamimage: encode JSON: %w", err)
	}
	return b, nil
}

// ToPlainMap converts a stream image to Go values that encoding/json renders
// as plain JSON: string, json.Number, []byte (base64), bool, nil, []any and
// map[string]any. Errors as ToJSON.
func ToPlainMap(image map[string]events.DynamoDBAttributeValue) (map[string]any, error) {
	out := make(map[string]any, len(image))
	for k, v := range image {
		p, err := ToPlain(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = p
	}
	return out, nil
}

// ToPlain converts one stream attribute value as ToPlainMap does.
func ToPlain(v events.DynamoDBAttributeValue) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: %v", ErrUnsupportedType, r)
		}
	}()
	switch v.DataType() {
	case events.DataTypeString:
		return v.String(), nil
	case events.DataTypeNumber:
		return number(v.Number())
	case events.DataTypeBinary:
		b := v.Binary()
		if b == nil {
			return nil, fmt.Errorf("%w: zero value", ErrUnsupportedType)
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case events.DataTypeBoolean:
		return v.Boolean(), nil
	case events.DataTypeNull:
		return nil, nil
	case events.DataTypeStringSet:
		ss := v.StringSet()
		l := make([]any, len(ss))
		for i, s := range ss {
			l[i] = s
		}
		return l, nil
	case events.DataTypeNumberSet:
		ns := v.NumberSet()
		l := make([]any, len(ns))
		for i, s := range ns {
			n, err := number(s)
			if err != nil {
				return nil, err
			}
			l[i] = n
		}
		return l, nil
	case events.DataTypeBinarySet:
		bs := v.BinarySet()
		l := make([]any, len(bs))
		for i, b := range bs {
			l[i] = base64.StdEncoding.EncodeToString(b)
		}
		return l, nil
	case events.DataTypeList:
		src := v.List()
		l := make([]any, len(src))
		for i, e := range src {
			p, err := ToPlain(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = p
		}
		return l, nil
	case events.DataTypeMap:
		return ToPlainMap(v.Map())
	}
	return nil, fmt.Errorf("%w: data type %d", ErrUnsupportedType, v.DataType())
}

// number checks that s is a JSON number literal and returns it as json.Number
// without changing a digit.
func number(s string) (json.Number, error) {
	if !json.Valid([]byte(s)) || !isNumberLiteral(s) {
		return "", fmt.Errorf("%w: %q", ErrInvalidNumber, s)
	}
	return json.Number(s), nil
}

// isNumberLiteral reports whether s starts like a JSON number (json.Valid has
// already accepted it as one JSON value).
func isNumberLiteral(s string) bool {
	return s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

func sortedKeys(m map[string]events.DynamoDBAttributeValue) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
