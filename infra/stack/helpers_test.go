package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// fakeAssets writes <dir>/<fn>/bootstrap placeholders so synth can package
// assets without `make build` (the real stack points at dist/).
func fakeAssets(dir string) error {
	for _, fn := range []string{"api", "relay", "reconciler", "ledger", "notifier", "fulfilment"} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n# placeholder for tests\n"), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// synthesized is one stack's template, as the assertions package sees it
// and as plain JSON for walking.
type synthesized struct {
	stack *OrdersStack
	tmpl  assertions.Template
	res   map[string]map[string]any // logical id -> resource
	json  map[string]any
}

func synth(st *OrdersStack) (*synthesized, error) {
	tmpl := assertions.Template_FromStack(st.Stack, nil)
	raw, err := json.Marshal(*tmpl.ToJSON())
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	res := map[string]map[string]any{}
	for id, r := range doc["Resources"].(map[string]any) {
		res[id] = r.(map[string]any)
	}
	return &synthesized{stack: st, tmpl: tmpl, res: res, json: doc}, nil
}

// ofType returns the logical ids of resources of type typ, sorted.
func (s *synthesized) ofType(typ string) []string {
	var ids []string
	for id, r := range s.res {
		if r["Type"] == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// props returns the Properties of resource id.
func (s *synthesized) props(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := s.res[id]
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// id returns the logical id of a construct's default (CloudFormation) child
// or of the construct itself when it is a CfnElement.
func (s *synthesized) id(c constructs.IConstruct) string {
	var el awscdk.CfnElement
	if e, ok := c.(awscdk.CfnElement); ok {
		el = e
	} else {
		el = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	// the element's logical id as the template has it: an overridden one
	// (keepLogicalIDs) included, which Stack.GetLogicalId does not see
	return s.stack.Stack.Resolve(el.LogicalId()).(string)
}

// has runs Template.HasResourceProperties and turns its panic into a test
// error.
func (s *synthesized) has(t *testing.T, typ string, props map[string]any) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("HasResourceProperties(%s): %v", typ, r)
		}
	}()
	s.tmpl.HasResourceProperties(jsii.String(typ), props)
}

// get walks m along path (map keys, or int indexes into lists).
func get(m any, path ...any) any {
	cur := m
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = mm[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			cur = l[k]
		}
	}
	return cur
}

// ref is {"Ref": id}; getAtt is {"Fn::GetAtt": [id, attr]}.
func ref(id string) map[string]any { return map[string]any{"Ref": id} }
func getAtt(id, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{id, attr}}
}

// jsonEqual reports whether a and b are equal after a JSON round trip.
func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	return reflect.DeepEqual(normalize(t, a), normalize(t, b))
}

func normalize(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// strs returns an IAM Action/Resource value as a list.
func strs(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

// mentions reports whether v's JSON contains s.
func mentions(t *testing.T, v any, s string) bool {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(raw), s)
}
