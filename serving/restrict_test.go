package serving

import (
	"strings"
	"testing"
)

func TestRestrictions(t *testing.T) {
	r, err := ParseRestrictions([]string{"model-repository:admin-key=admin-value", "inference,metadata:infer-key=infer-value"}, "api")
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"infer-key": "infer-value"}
	get := func(k string) string { return h[k] }
	if miss := r.Check("inference", "", get); miss != "" {
		t.Fatalf("inference with the key: %q", miss)
	}
	if miss := r.Check("model-repository", "", get); miss != "admin-key" {
		t.Fatalf("model-repository without its key: %q", miss)
	}
	if miss := r.Check("statistics", "", get); miss != "" {
		t.Fatalf("unrestricted: %q", miss)
	}
	if miss := r.Check("metadata", "triton-grpc-protocol-", get); miss != "triton-grpc-protocol-infer-key" {
		t.Fatalf("gRPC prefix: %q", miss)
	}
	for v, want := range map[string]string{
		"model-reposit,health:k1=v1": "unknown restricted api 'model-reposit'",
		"health":                     "want <category>",
		"health:k1":                  "want <category>",
	} {
		if _, err := ParseRestrictions([]string{v}, "api"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", v, err)
		}
	}
	if _, err := ParseRestrictions([]string{"model-repository,health:k1=v1", "metadata,health:k2=v2"}, "api"); err == nil || !strings.Contains(err.Error(), "api 'health' can not be specified in multiple config groups") {
		t.Errorf("repeated: %v", err)
	}
}
