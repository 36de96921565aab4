package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// runHealth probes a running server's readiness: for container health checks
// in images without curl. Exit 0 when /health/ready answers 200, else 1.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	url := "http://127.0.0.1:8000"
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			fmt.Fprintln(stderr, "Usage: fw health [URL]   (default http://127.0.0.1:8000): exit 0 when URL/health/ready answers 200")
			return 0
		}
		url = strings.TrimRight(args[0], "/")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health/ready", nil)
	if err != nil {
		fmt.Fprintf(stderr, "fw health: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "fw health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "fw health: %s: %d %s\n", url, resp.StatusCode, strings.TrimSpace(string(body)))
		return 1
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
	return 0
}
