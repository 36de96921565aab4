package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/fw-serve/fw/engine"
)

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "fw %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if v, err := engine.ORTVersion(""); err == nil {
		fmt.Fprintf(stdout, "onnxruntime %s (%s)\n", v, engine.ORTLibraryPath(""))
	} else {
		fmt.Fprintf(stdout, "onnxruntime unavailable: %v\n", err)
	}
	if v, err := engine.TorchVersion(""); err == nil {
		fmt.Fprintf(stdout, "libtorch %s (%s, cuda: %v)\n", v, engine.TorchShimPath(""), engine.TorchCUDAAvailable(""))
	} else {
		fmt.Fprintf(stdout, "libtorch unavailable: %v\n", err)
	}
	fmt.Fprintf(stdout, "cpus available: %d\n", engine.AvailableCPUs())
	return 0
}
