package engine

import "slices"

// FormatInfo is what the rest of fw needs to know about one model file
// format, in one place: loading, the Triton platform and backend names,
// the repository file names, the registry's file extension and the CLI's
// directory lookup all read this table, so a new format is added here once
// (engine/formats_test.go fails for a Format constant missing from it).
type FormatInfo struct {
	Format Format
	// Runtime is the engine that runs it: "onnxruntime" or "libtorch".
	Runtime string
	// Platform and Backend are Triton's names for what serves it
	// (config.pbtxt platform/backend, the metadata's platform).
	Platform, Backend string
	// RepositoryFile is the file name Triton's layout gives it in a
	// version directory (DIR/<model>/<version>/model.onnx).
	RepositoryFile string
	// RegistryExt is the extension of its file in the dashboard's registry.
	RegistryExt string
}

// formats is the table; it is never modified.
var formats = []FormatInfo{
	{FormatONNX, "onnxruntime", "onnxruntime_onnx", "onnxruntime", "model.onnx", "onnx"},
	{FormatONNXInt8, "onnxruntime", "onnxruntime_onnx", "onnxruntime", "model.onnx", "int8.onnx"},
	{FormatTorchScript, "libtorch", "pytorch_libtorch", "pytorch", "model.pt", "pt"},
	{FormatQuantized, "libtorch", "pytorch_libtorch", "pytorch", "model.pt", "quant.pt"},
	{FormatAOTI, "libtorch", "pytorch_libtorch", "pytorch", "model.pt2", "pt2"},
}

// Formats lists every format fw serves.
func Formats() []FormatInfo { return slices.Clone(formats) }

// Info is the format's entry in the table; ok is false for a format fw
// does not know.
func (f Format) Info() (FormatInfo, bool) {
	for _, fi := range formats {
		if fi.Format == f {
			return fi, true
		}
	}
	return FormatInfo{}, false
}

// ModelFileExts are the file name extensions fw recognises as model files
// when it looks for one in a directory (detection itself reads the
// content, not the name).
func ModelFileExts() []string {
	return []string{".onnx", ".pt", ".pth", ".pt2", ".ts", ".torchscript"}
}
