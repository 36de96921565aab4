// Package hostguard decides which Host header values a server accepts: the
// defence against DNS rebinding, where a web page on a name the attacker
// controls (evil.example) has that name re-resolved to 127.0.0.1 and then
// reads a loopback-bound server "same-origin". The browser still sends
// `Host: evil.example:PORT`, so a server that only answers the names it is
// known by cannot be read that way. The model server and the dashboard both
// use it (--allowed-hosts); the policy is built in cmd/fw and passed in.
package hostguard

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Policy is the set of accepted Host values. The zero value and nil accept
// every Host (the check is off).
type Policy struct {
	on        bool
	names     map[string]bool // host names and IPs accepted with any port
	hostPorts map[string]bool // "name:port" accepted with that port only
	suffixes  []string        // ".example.com": every subdomain of example.com
}

// New builds the policy of a server bound to listenHost (its --host) with the
// extra entries of --allowed-hosts. The check is on when listenHost is a
// loopback address (127.0.0.1, ::1, localhost) or allowed is not empty; it
// then accepts localhost, 127.0.0.1, ::1 (any loopback IP) and the bound
// host, each with any port, plus the allowed entries. An entry is a name or
// IP ("dash.example.com", "10.0.0.5"), a name with a port (that port only),
// ".example.com" (the domain and its subdomains) or "*" (turns the check off).
// A server bound elsewhere without entries checks nothing: it needs a token
// (the dashboard) or is meant to be reached under any name.
func New(listenHost string, allowed []string) (*Policy, error) {
	p := &Policy{names: map[string]bool{}, hostPorts: map[string]bool{}}
	lh := normName(listenHost)
	p.on = IsLoopback(lh) || len(allowed) > 0 // "" (not known): only with entries
	for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
		p.names[n] = true
	}
	if lh != "" {
		p.names[lh] = true
		if ip := net.ParseIP(lh); ip != nil && ip.IsUnspecified() { // 0.0.0.0 and :: are one socket on dual-stack hosts
			p.names["0.0.0.0"], p.names["::"] = true, true
		}
	}
	for _, raw := range allowed {
		e := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case e == "":
			continue
		case e == "*":
			p.on = false
			continue
		case strings.Contains(e, "/"):
			return nil, fmt.Errorf("allowed host %q: give a host name (dash.example.com or dash.example.com:8080), not a URL", raw)
		case strings.HasPrefix(e, "."):
			if len(e) < 2 || strings.ContainsAny(e, ":[]") {
				return nil, fmt.Errorf("allowed host %q: a domain entry is .example.com (no port)", raw)
			}
			p.suffixes = append(p.suffixes, strings.TrimSuffix(e, "."))
			continue
		}
		name, port, ok := split(e)
		if !ok || name == "" {
			return nil, fmt.Errorf("allowed host %q: not a host name, IP or host:port ([::1]:8080 for IPv6 with a port)", raw)
		}
		if port == "" {
			p.names[name] = true
		} else {
			p.hostPorts[name+":"+port] = true
		}
	}
	return p, nil
}

// Enabled reports whether the policy checks anything.
func (p *Policy) Enabled() bool { return p != nil && p.on }

// Allow reports whether a request with this Host header is accepted.
func (p *Policy) Allow(host []byte) bool {
	if !p.Enabled() {
		return true
	}
	name, port, ok := split(strings.ToLower(string(host)))
	if !ok || name == "" {
		return false
	}
	if p.names[name] || IsLoopbackIP(name) {
		return true
	}
	if port != "" && p.hostPorts[name+":"+port] {
		return true
	}
	for _, s := range p.suffixes {
		if name == s[1:] || strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// IsLoopback reports whether host (a --host value) only accepts local
// connections: localhost or a loopback IP.
func IsLoopback(host string) bool {
	h := normName(host)
	return h == "localhost" || IsLoopbackIP(h)
}

// IsLoopbackIP reports whether s is a loopback IP literal (127.0.0.0/8, ::1).
func IsLoopbackIP(s string) bool {
	ip := net.ParseIP(s)
	return ip != nil && ip.IsLoopback()
}

// ParseList splits a comma-separated flag value into its trimmed, non-empty entries.
func ParseList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// normName lower-cases a host name or IP and drops IPv6 brackets and a
// trailing dot (the fully qualified form of the same name).
func normName(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(h, ".")
}

// split parses a Host value ("name", "name:port", "[v6]", "[v6]:port") into
// its normalised name and port; ok is false for anything malformed
// (including a bare IPv6 address, which is not a valid Host).
func split(h string) (name, port string, ok bool) {
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", "", false
		}
		name, rest := h[1:end], h[end+1:]
		if net.ParseIP(name) == nil {
			return "", "", false
		}
		if rest == "" {
			return name, "", true
		}
		if !strings.HasPrefix(rest, ":") || !validPort(rest[1:]) {
			return "", "", false
		}
		return name, rest[1:], true
	}
	switch strings.Count(h, ":") {
	case 0:
		name = h
	case 1:
		i := strings.IndexByte(h, ':')
		name, port = h[:i], h[i+1:]
		if !validPort(port) {
			return "", "", false
		}
	default:
		return "", "", false
	}
	if strings.ContainsAny(name, " \t/\\@?#") {
		return "", "", false
	}
	return strings.TrimSuffix(name, "."), port, true
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535 && len(p) <= 5
}
