package hostguard

import (
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	cases := []struct {
		listen  string
		allowed []string
		host    string
		want    bool
	}{
		// Bound to loopback: the loopback names with any port, nothing else.
		{"127.0.0.1", nil, "127.0.0.1:8080", true},
		{"127.0.0.1", nil, "localhost:8080", true},
		{"127.0.0.1", nil, "LOCALHOST:5173", true},
		{"127.0.0.1", nil, "localhost.:8080", true},
		{"127.0.0.1", nil, "[::1]:8080", true},
		{"127.0.0.1", nil, "127.0.0.2", true},
		{"127.0.0.1", nil, "evil.example:8080", false}, // DNS rebinding
		{"127.0.0.1", nil, "evil.localhost:8080", false},
		{"127.0.0.1", nil, "localhost.evil.example", false},
		{"127.0.0.1", nil, "", false},
		{"127.0.0.1", nil, "::1", false}, // a bare IPv6 address is not a Host
		{"127.0.0.1", nil, "localhost:99999", false},
		{"127.0.0.1", nil, "localhost:x", false},
		{"127.0.0.1", nil, "[::1", false},
		{"127.0.0.1", nil, "[nope]:80", false},
		{"localhost", nil, "evil.example", false},
		{"::1", nil, "[::1]:8080", true},
		{"::1", nil, "10.0.0.5:8080", false},
		// Extra entries.
		{"127.0.0.1", []string{"dash.example.com"}, "dash.example.com:8080", true},
		{"127.0.0.1", []string{"dash.example.com:443"}, "dash.example.com:8080", false},
		{"127.0.0.1", []string{"dash.example.com:443"}, "dash.example.com:443", true},
		{"127.0.0.1", []string{".example.com"}, "a.b.example.com", true},
		{"127.0.0.1", []string{".example.com"}, "example.com", true},
		{"127.0.0.1", []string{".example.com"}, "badexample.com", false},
		{"127.0.0.1", []string{"[fd00::1]:80"}, "[fd00::1]:80", true},
		{"127.0.0.1", []string{"*"}, "evil.example", true},
		// Elsewhere: no check unless entries are given (the token protects).
		{"0.0.0.0", nil, "evil.example", true},
		{"10.0.0.5", nil, "evil.example", true},
		{"0.0.0.0", []string{"dash.example.com"}, "evil.example", false},
		{"0.0.0.0", []string{"dash.example.com"}, "dash.example.com", true},
		{"0.0.0.0", []string{"dash.example.com"}, "[::]:8080", true}, // the address the listener reports
		{"0.0.0.0", []string{"dash.example.com"}, "localhost:8080", true},
		{"10.0.0.5", []string{"dash.example.com"}, "10.0.0.5:8080", true},
		{"", nil, "evil.example", true},
	}
	for _, c := range cases {
		p, err := New(c.listen, c.allowed)
		if err != nil {
			t.Fatalf("New(%q, %q): %v", c.listen, c.allowed, err)
		}
		if got := p.Allow([]byte(c.host)); got != c.want {
			t.Errorf("bound to %q with %q: Allow(%q) = %v, want %v", c.listen, c.allowed, c.host, got, c.want)
		}
	}
	var nilPolicy *Policy
	if !nilPolicy.Allow([]byte("anything")) || nilPolicy.Enabled() {
		t.Error("a nil policy must accept every Host")
	}
}

func TestNewRefusesMalformedEntries(t *testing.T) {
	for _, e := range []string{"http://dash.example.com", "dash.example.com/x", "a:b:c", "host:99999", ".", ".example.com:80", "[::1"} {
		if _, err := New("127.0.0.1", []string{e}); err == nil || !strings.Contains(err.Error(), e) {
			t.Errorf("New with %q: err %v, want one naming the entry", e, err)
		}
	}
}

func TestParseList(t *testing.T) {
	got := ParseList(" a, ,b ,")
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("ParseList = %q", got)
	}
	if ParseList("") != nil {
		t.Fatal("ParseList(\"\") must be empty")
	}
}
