package registry

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestValidName(t *testing.T) {
	f := func(name string, ok bool) {
		t.Helper()
		if err := ValidName("model name", name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
	f("digits_mlp", true)
	f("v1.2-final", true)
	f("", false)
	f("../x", false)
	f(".hidden", false)
	f("a/b", false)
	f("a b", false)
}

func TestRequestsTotal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("# HELP fw_http_requests_total x\n# TYPE fw_http_requests_total counter\n" +
			"fw_http_requests_total{code=\"200\",endpoint=\"/predict\"} 7\nfw_http_requests_total{code=\"503\",endpoint=\"/health\"} 3\n" +
			"fw_http_requests_total_other 100\n"))
	}))
	defer srv.Close()
	if n, ok := requestsTotal(srv.URL); !ok || n != 10 {
		t.Fatalf("requestsTotal = %v, %v; want 10", n, ok)
	}
}
