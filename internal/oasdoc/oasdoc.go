// Package oasdoc reads an OpenAPI document for tests: parse it, follow its
// local $refs, and list its operations. Both servers' document tests use it
// (httpapi for fw serve, dashboard/api for fw dashboard).
package oasdoc

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// Methods are the operation keys of an OpenAPI path item.
var Methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Parse decodes the document or fails the test.
func Parse(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return doc
}

// Pointer follows a local JSON pointer ("#/components/...").
func Pointer(t testing.TB, doc map[string]any, ref string) any {
	t.Helper()
	if !strings.HasPrefix(ref, "#/") {
		t.Fatalf("$ref %q is not local", ref)
	}
	var cur any = doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("$ref %q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			t.Fatalf("$ref %q does not resolve (no %q)", ref, tok)
		}
	}
	return cur
}

// Resolve follows v's $ref chain (if any) to what it names.
func Resolve(t testing.TB, doc map[string]any, v any) any {
	t.Helper()
	for i := 0; i < 16; i++ {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		v = Pointer(t, doc, ref)
	}
	t.Fatalf("$ref chain too deep")
	return nil
}

// Operation is one path and method of the document.
type Operation struct {
	Path, Method string
	Op           map[string]any
}

// Operations lists the document's operations, sorted by path and method.
func Operations(doc map[string]any) []Operation {
	var ops []Operation
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		for _, m := range Methods {
			if op, ok := item.(map[string]any)[m].(map[string]any); ok {
				ops = append(ops, Operation{p, m, op})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Path+ops[i].Method < ops[j].Path+ops[j].Method })
	return ops
}
