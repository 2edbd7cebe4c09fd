package app

import (
	"fmt"
	"go/types"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/callgraph/rta"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// modulePath is the root module; only call sites in its packages count (the
// SDK's own internals, e.g. credential providers, are not the function's
// calls).
const modulePath = "github.com/ddb-outbox/ddb-outbox"

// sdkServicePrefix is the import path prefix of AWS SDK for Go v2 service
// clients; an operation's input type is <prefix><service>.<Operation>Input.
const sdkServicePrefix = "github.com/aws/aws-sdk-go-v2/service/"

// sdkCalls loads the main packages at dirs (relative to the module root)
// with their dependencies, builds SSA, and for each main runs Rapid Type
// Analysis from its init and main. It returns, per dir, every SDK operation
// ("dynamodb.GetItem") called from a reachable function of this module, with
// the call sites: a call counts when a parameter of the called function or
// interface method is *<service>.<Operation>Input (so a paginator built from
// a ScanInput counts as Scan).
//
// RTA is sound for calls through interfaces and function values; calls made
// only through reflect or unsafe would be missed (the module has none).
func sdkCalls(t *testing.T, dirs ...string) map[string]map[string][]string {
	t.Helper()
	cfg := &packages.Config{Mode: packages.LoadAllSyntax, Dir: "../../.."}
	pkgs, err := packages.Load(cfg, dirs...)
	if err != nil {
		t.Fatal(err)
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		t.Fatalf("%d errors loading %v", n, dirs)
	}
	prog, spkgs := ssautil.AllPackages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	out := map[string]map[string][]string{}
	for i, sp := range spkgs {
		if sp == nil || sp.Func("main") == nil {
			t.Fatalf("%s is not a main package", dirs[i])
		}
		res := rta.Analyze([]*ssa.Function{sp.Func("init"), sp.Func("main")}, false)
		ops := map[string][]string{}
		for fn := range res.Reachable {
			if !inModule(fn) {
				continue
			}
			for _, b := range fn.Blocks {
				for _, ins := range b.Instrs {
					c, ok := ins.(ssa.CallInstruction)
					if !ok {
						continue
					}
					sig := c.Common().Signature()
					for j := 0; j < sig.Params().Len(); j++ {
						if op, ok := sdkOperation(sig.Params().At(j).Type()); ok {
							pos := prog.Fset.Position(ins.Pos())
							ops[op] = append(ops[op], fmt.Sprintf("%s:%d (%s)", pos.Filename, pos.Line, fn.RelString(nil)))
						}
					}
				}
			}
		}
		out[dirs[i]] = ops
	}
	return out
}

// inModule reports whether fn (or the generic function it instantiates)
// belongs to a package of this module.
func inModule(fn *ssa.Function) bool {
	p := fn.Pkg
	if p == nil && fn.Origin() != nil {
		p = fn.Origin().Pkg
	}
	if p == nil {
		return false
	}
	path := p.Pkg.Path()
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

// sdkOperation returns "<service>.<Operation>" when t is
// *<service>.<Operation>Input of an SDK v2 service client package.
func sdkOperation(t types.Type) (string, bool) {
	ptr, ok := t.(*types.Pointer)
	if !ok {
		return "", false
	}
	n, ok := ptr.Elem().(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return "", false
	}
	path, name := n.Obj().Pkg().Path(), n.Obj().Name()
	svc, ok := strings.CutPrefix(path, sdkServicePrefix)
	if !ok || strings.Contains(svc, "/") || !strings.HasSuffix(name, "Input") || name == "Input" {
		return "", false
	}
	return n.Obj().Pkg().Name() + "." + strings.TrimSuffix(name, "Input"), true
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	functionCallsOnce sync.Once
	functionCalls     map[string]map[string][]string
)

// TestPermissionsMatchSDKCalls fails when a function's code can reach an SDK
// operation Permissions does not declare (add the Call with its grants, and
// the stack grants it), or when Permissions declares one the code no longer
// reaches (remove it: the role would grant actions nothing calls).
func TestPermissionsMatchSDKCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and analyses every function's program (~10 s)")
	}
	var dirs []string
	for _, f := range Permissions() {
		dirs = append(dirs, "./functions/"+f.Function)
	}
	functionCallsOnce.Do(func() { functionCalls = sdkCalls(t, dirs...) })
	for _, f := range Permissions() {
		got := functionCalls["./functions/"+f.Function]
		if got == nil {
			t.Fatalf("no analysis of %s", f.Function)
		}
		want := f.Operations()
		for _, op := range keys(got) {
			if !slices.Contains(want, op) {
				t.Errorf("%s calls %s, which Permissions does not declare; call sites:\n\t%s",
					f.Function, op, strings.Join(got[op], "\n\t"))
			}
		}
		for _, op := range want {
			if _, ok := got[op]; !ok {
				t.Errorf("%s: Permissions declares %s, but no code reachable from functions/%s/main.go calls it", f.Function, op, f.Function)
			}
		}
	}
}

// The analysis must see calls through an interface, a paginator and a
// closure, and must not count a call in a function main never reaches.
func TestSDKCallAnalysisFindsReachableCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and analyses a program")
	}
	dir := "./internal/orders/app/testdata/sdkcalls"
	got := keys(sdkCalls(t, dir)[dir])
	want := []string{"dynamodb.GetItem", "dynamodb.Scan", "sqs.SendMessage"}
	if !slices.Equal(got, want) {
		t.Errorf("operations = %v, want %v", got, want)
	}
}

func TestPermissionsCoverEveryFunction(t *testing.T) {
	entries, err := os.ReadDir("../../../functions")
	if err != nil {
		t.Fatal(err)
	}
	var dirs, declared []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	for _, f := range Permissions() {
		declared = append(declared, f.Function)
	}
	sort.Strings(declared)
	if !slices.Equal(dirs, declared) {
		t.Errorf("functions/ has %v, Permissions declares %v", dirs, declared)
	}
}

func TestPermissionsAreWellFormed(t *testing.T) {
	for _, f := range Permissions() {
		for _, c := range f.Calls {
			if !strings.Contains(c.Operation, ".") || c.Why == "" || len(c.Grants) == 0 {
				t.Errorf("%s: call %+v needs an operation, grants and a reason", f.Function, c)
			}
		}
		for _, p := range f.Platform {
			if p.Why == "" {
				t.Errorf("%s: platform grant %v has no reason", f.Function, p.Grant)
			}
		}
		for r, actions := range f.Actions() {
			for _, a := range actions {
				if strings.Contains(a, "*") || !strings.Contains(a, ":") {
					t.Errorf("%s: action %q on %s is not one service:Action", f.Function, a, r)
				}
				if r == ResourceAll && a != "dynamodb:ListStreams" && a != "xray:PutTraceSegments" && a != "xray:PutTelemetryRecords" {
					t.Errorf("%s: %s on resource * (only actions without resource-level permissions may be)", f.Function, a)
				}
			}
		}
	}
	// the unused grants stay out
	api, _ := PermissionsOf(FunctionAPI)
	if slices.Contains(api.Actions()[ResourceOrdersTable], "dynamodb:UpdateItem") ||
		slices.Contains(api.Actions()[ResourceOrdersTable], "dynamodb:ConditionCheckItem") {
		t.Errorf("api orders table actions = %v", api.Actions()[ResourceOrdersTable])
	}
	// The consumers read and write only their own table (their effects
	// and, beside them, their dedup state: markers, ordering items,
	// buffer): no consumer can write another's state.
	for name, own := range map[string]Resource{FunctionLedger: ResourceLedgerTable, FunctionNotifier: ResourceNotificationsTable} {
		f, _ := PermissionsOf(name)
		for r, a := range f.Actions() {
			if r == own || r == ResourceConsumerStateIndex || !strings.HasSuffix(string(r), "-table") {
				continue
			}
			t.Errorf("%s has %v on %s; a consumer touches only its own table", name, a, r)
		}
		if !slices.Contains(f.Actions()[own], "dynamodb:GetItem") {
			t.Errorf("%s cannot read its ordering items (dynamodb:GetItem on its own table)", name)
		}
	}
}
