package engine

// FormatEnsemble is a model that is no file but a pipeline of other models
// (Triton's ensemble platform): its backend runs the pipeline's steps.
// It is not in the formats table: it has no file name, no registry
// extension and no engine of its own.
const FormatEnsemble Format = "ensemble"

// Compose makes a Model of a backend that is not a model file: an
// ensemble's pipeline, which runs other models. Its specs are the given
// ones (the backend's are not consulted); it takes every known datatype
// (what a step cannot take, that step's model refuses); NaN and Inf pass
// through to the steps, whose own models check them. path names where it
// was configured (for logs); name and version are what it is served as.
func Compose(path, name, version string, inputs, outputs []TensorSpec, batched bool, b Backend) *Model {
	return Wrap(FormatEnsemble, path, name, version, inputs, outputs, batched, b)
}

// FormatPython is a model written for Triton's Python backend (a model.py
// that pybackend runs in Python processes of its own). Like an ensemble it
// is not in the formats table: no engine here loads it.
const FormatPython Format = "python"

// Wrap makes a Model of a backend that runs outside fw's engines (an
// ensemble's pipeline, a Python model's processes), served as format, with
// the given specs, as Compose describes.
func Wrap(format Format, path, name, version string, inputs, outputs []TensorSpec, batched bool, b Backend) *Model {
	return &Model{
		Path: path, Format: format, Device: "cpu", backend: b,
		Meta:   &Metadata{Name: name, Version: version},
		inputs: inputs, outputs: outputs, batched: batched,
		opts: Options{AllowNonFinite: true},
	}
}

// external reports whether the format runs outside fw's engines (an
// ensemble, a Python model): its backend takes what its specs say.
func (f Format) external() bool { return f == FormatEnsemble || f == FormatPython }
