package serving

import (
	"fmt"
	"slices"
	"strings"
)

// The API categories Triton's --http-restricted-api and
// --grpc-restricted-protocol flags restrict, in Triton's names.
var apiCategories = []string{"health", "metadata", "inference", "shared-memory", "model-config", "model-repository", "statistics", "trace", "logging"}

// Restrictions say which API categories need which header: a request in a
// restricted category is refused unless it carries the header key with
// the value (tritonserver's --http-restricted-api / --grpc-restricted-protocol,
// whose values fw reads unchanged). The zero value restricts nothing.
type Restrictions struct {
	rules map[string]restriction // by category
}

type restriction struct{ key, value string }

// ParseRestrictions reads flag values of the form
// "category[,category...]:key=value"; a category named in two values or
// unknown is an error in Triton's words. what is "api" or "protocol", for
// the messages.
func ParseRestrictions(values []string, what string) (Restrictions, error) {
	r := Restrictions{rules: map[string]restriction{}}
	for _, v := range values {
		cats, kv, ok := strings.Cut(v, ":")
		key, value, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || cats == "" || key == "" {
			return Restrictions{}, fmt.Errorf("restricted %s %q: want <category>[,<category>...]:<header key>=<header value>", what, v)
		}
		for _, c := range strings.Split(cats, ",") {
			c = strings.TrimSpace(c)
			if !slices.Contains(apiCategories, c) {
				return Restrictions{}, fmt.Errorf("unknown restricted %s '%s'; the categories are %s", what, c, strings.Join(apiCategories, ", "))
			}
			if _, dup := r.rules[c]; dup {
				return Restrictions{}, fmt.Errorf("%s '%s' can not be specified in multiple config groups", what, c)
			}
			r.rules[c] = restriction{key: strings.TrimSpace(key), value: value}
		}
	}
	return r, nil
}

// Any reports whether some category is restricted.
func (r Restrictions) Any() bool { return len(r.rules) > 0 }

// Check returns "" when a request of category may go on, header giving
// its header values (prefix is put before the key: gRPC's
// "triton-grpc-protocol-"); otherwise the header it lacks.
func (r Restrictions) Check(category, prefix string, header func(string) string) string {
	rule, ok := r.rules[category]
	if !ok {
		return ""
	}
	name := prefix + rule.key
	if header(name) == rule.value {
		return ""
	}
	return name
}
