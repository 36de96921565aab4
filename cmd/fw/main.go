// Command fw is the single binary of the fw project: the model server
// (fw serve), the dashboard (fw dashboard), and tools around exported model
// files (fw verify, fw export).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "serve one exported model over HTTP with dynamic batching (fw serve --help)", runServe},
		{"dashboard", "track experiments: the ingest and read API over the experiment store (fw dashboard --help)", runDashboard},
		{"verify", "load a model file in the Go engine, run its embedded test vector and time it", runVerify},
		{"tune", "search fw serve's batching and threading settings for a model against a p99 target (fw tune --help)", runTune},
		{"export", "export a training checkpoint to ONNX, int8 ONNX, TorchScript, quantized TorchScript or an AOTInductor package (runs python -m fw.export)", runExport},
		{"health", "probe a running server's readiness (exit 0 when ready; for container health checks)", runHealth},
		{"version", "print the fw version and the engine libraries it finds", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "fw %s: serve PyTorch models and track experiments\n\nUsage:\n  fw <command> [flags]\n\nCommands:\n", version)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `fw <command> --help` for a command's flags.\n")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version", "-v":
		args[0] = "version"
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "fw: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}
