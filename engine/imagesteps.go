package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// ImageStepsFormatVersion is the fw_format a document needs once its
// preprocessing.image has steps: readers of format 1 ignore unknown fields,
// so a version-1 reader would silently stretch the image instead of running
// the steps; version 2 makes it refuse the file instead.
const ImageStepsFormatVersion = 2

// MaxImageStepSide bounds every size a step names (resize, center_crop,
// max_size), so a hostile model file cannot make the server allocate
// without bound.
const MaxImageStepSide = 1 << 15

// Image step operations (ImageStep.Op), each one torchvision transform.
const (
	StepConvert    = "convert"     // the loader's PIL Image.convert(mode): "RGB" or "L"
	StepGrayscale  = "grayscale"   // Grayscale(num_output_channels)
	StepResize     = "resize"      // Resize(size, interpolation, max_size, antialias)
	StepCenterCrop = "center_crop" // CenterCrop(size)
	StepToImage    = "to_image"    // v2.ToImage: PIL image to a uint8 tensor
	StepToTensor   = "to_tensor"   // ToTensor: uint8 PIL image to float32 / 255
	StepToDtype    = "to_dtype"    // v2.ToDtype(torch.float32, scale=True): uint8 tensor * (1/255)
	StepNormalize  = "normalize"   // Normalize(mean, std)
)

// ImageStep is one entry of preprocessing.image.steps (docs/model-format.md):
// one transform of the user's torchvision eval pipeline, in order. Only the
// fields of its Op may be present; a field or an op this version does not
// know makes the whole document invalid, so no step is ever skipped.
type ImageStep struct {
	Op            string    `json:"op"`
	Mode          string    `json:"mode,omitempty"`
	Channels      int       `json:"channels,omitempty"`
	Size          []int     `json:"size,omitempty"`
	MaxSize       *int      `json:"max_size,omitempty"`
	Interpolation string    `json:"interpolation,omitempty"`
	Antialias     *bool     `json:"antialias,omitempty"`
	DType         string    `json:"dtype,omitempty"`
	Scale         *bool     `json:"scale,omitempty"`
	Mean          []float64 `json:"mean,omitempty"`
	Std           []float64 `json:"std,omitempty"`
}

// stepFields lists the fields an op takes besides "op".
func stepFields(op string) ([]string, bool) {
	switch op {
	case StepConvert:
		return []string{"mode"}, true
	case StepGrayscale:
		return []string{"channels"}, true
	case StepResize:
		return []string{"size", "max_size", "interpolation", "antialias"}, true
	case StepCenterCrop:
		return []string{"size"}, true
	case StepToImage, StepToTensor:
		return nil, true
	case StepToDtype:
		return []string{"dtype", "scale"}, true
	case StepNormalize:
		return []string{"mean", "std"}, true
	}
	return nil, false
}

// StepOps lists the operations this version understands, for messages.
func StepOps() []string {
	return []string{StepConvert, StepGrayscale, StepResize, StepCenterCrop, StepToImage, StepToTensor, StepToDtype, StepNormalize}
}

// UnmarshalJSON decodes one step, refusing an unknown op and any field its
// op does not take (a reader must not ignore part of a step).
func (s *ImageStep) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("a step must be an object: %w", err)
	}
	var op string
	if raw, ok := fields["op"]; !ok || json.Unmarshal(raw, &op) != nil {
		return fmt.Errorf(`a step needs "op", one of %s`, strings.Join(StepOps(), ", "))
	}
	allowed, ok := stepFields(op)
	if !ok {
		return fmt.Errorf("step op %q is not one this fw understands (%s); upgrade fw or re-export the model", op, strings.Join(StepOps(), ", "))
	}
	var extra []string
	for k := range fields {
		if k != "op" && !contains(allowed, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("step %q has field(s) %s, which it does not take (it takes: %s); upgrade fw or re-export the model",
			op, strings.Join(extra, ", "), strings.Join(allowed, ", "))
	}
	type plain ImageStep // no UnmarshalJSON: decode the fields as usual
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("step %q: %w", op, err)
	}
	*s = ImageStep(p)
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Image step domains: what the data is when a step runs. Steps before
// to_image / to_tensor see a PIL image (8-bit, Pillow's operations); between
// to_image and to_dtype a uint8 tensor (PyTorch's uint8 kernels); after
// to_tensor / to_dtype a float32 tensor.
const (
	DomainPIL   = "pil"
	DomainUint8 = "uint8"
	DomainFloat = "float"
)

// StepsSummary is what a valid steps list produces.
type StepsSummary struct {
	Channels      int // channels of the output tensor
	Height, Width int // its fixed size
}

// CheckSteps validates p.Steps: known ops with valid values, in an order
// torchvision would run them in, ending in a float32 tensor of a fixed
// size. It returns the output's channels and size; the caller compares them
// with Height, Width and Channels.
func (p *ImagePreprocessing) CheckSteps() (StepsSummary, error) {
	var out StepsSummary
	steps := p.Steps
	if len(steps) == 0 {
		return out, fmt.Errorf("preprocessing.image.steps is empty; leave it out for the simple form")
	}
	if len(steps) > 64 {
		return out, fmt.Errorf("preprocessing.image.steps has %d steps, more than 64", len(steps))
	}
	if p.Resize != "" || p.Scale != 0 || len(p.Mean) > 0 || len(p.Std) > 0 || p.Invert {
		return out, fmt.Errorf("preprocessing.image has steps and also resize/scale/mean/std/invert of the simple form; keep one form (the steps carry these)")
	}
	domain := DomainPIL
	channels := 0
	h, w := 0, 0 // fixed size so far; 0 while it depends on the image
	for i, s := range steps {
		where := fmt.Sprintf("preprocessing.image.steps[%d] (%s)", i, s.Op)
		if i == 0 && s.Op != StepConvert {
			return out, fmt.Errorf(`%s: the first step must be {"op": "convert", "mode": "RGB"} (how the picture is loaded)`, where)
		}
		switch s.Op {
		case StepConvert:
			if i != 0 {
				return out, fmt.Errorf("%s: convert may only be the first step", where)
			}
			switch s.Mode {
			case "RGB":
				channels = 3
			case "L":
				channels = 1
			default:
				return out, fmt.Errorf(`%s: mode must be "RGB" or "L", got %q`, where, s.Mode)
			}
		case StepGrayscale:
			if domain == DomainFloat {
				return out, fmt.Errorf("%s: grayscale after to_tensor/to_dtype is not supported; put it before", where)
			}
			if s.Channels != 1 && s.Channels != 3 {
				return out, fmt.Errorf("%s: channels must be 1 or 3, got %d", where, s.Channels)
			}
			channels = s.Channels
		case StepResize:
			if domain == DomainFloat {
				return out, fmt.Errorf("%s: resizing a float tensor (after to_tensor/to_dtype) is not supported; resize before converting to float, as torchvision's reference transforms do", where)
			}
			if err := checkResize(s, domain); err != nil {
				return out, fmt.Errorf("%s: %w", where, err)
			}
			if len(s.Size) == 2 {
				h, w = s.Size[0], s.Size[1]
			} else {
				h, w = 0, 0
			}
		case StepCenterCrop:
			if domain == DomainFloat {
				return out, fmt.Errorf("%s: center_crop after to_tensor/to_dtype is not supported; crop before", where)
			}
			if len(s.Size) != 2 || !sideOK(s.Size[0]) || !sideOK(s.Size[1]) {
				return out, fmt.Errorf("%s: size must be [height, width], each 1..%d, got %v", where, MaxImageStepSide, s.Size)
			}
			h, w = s.Size[0], s.Size[1]
		case StepToImage:
			if domain != DomainPIL {
				return out, fmt.Errorf("%s: to_image needs a PIL image (it may appear once, before to_dtype)", where)
			}
			domain = DomainUint8
		case StepToTensor:
			if domain != DomainPIL {
				return out, fmt.Errorf("%s: to_tensor needs a PIL image (once, and not after to_image; use to_dtype there)", where)
			}
			domain = DomainFloat
		case StepToDtype:
			if domain != DomainUint8 {
				return out, fmt.Errorf("%s: to_dtype needs the uint8 tensor to_image makes (to_image first, once)", where)
			}
			if s.DType != "float32" || s.Scale == nil || !*s.Scale {
				return out, fmt.Errorf(`%s: only {"dtype": "float32", "scale": true} is supported`, where)
			}
			domain = DomainFloat
		case StepNormalize:
			if domain != DomainFloat {
				return out, fmt.Errorf("%s: normalize needs a float tensor (after to_tensor or to_dtype)", where)
			}
			for _, pair := range []struct {
				name string
				v    []float64
			}{{"mean", s.Mean}, {"std", s.Std}} {
				if len(pair.v) != 1 && len(pair.v) != channels {
					return out, fmt.Errorf("%s: %s has %d values for %d channel(s); give 1 or one per channel", where, pair.name, len(pair.v), channels)
				}
				for _, x := range pair.v {
					if math.IsNaN(x) || math.IsInf(x, 0) || (pair.name == "std" && x == 0) {
						return out, fmt.Errorf("%s: %s must be finite numbers (std non-zero), got %v", where, pair.name, pair.v)
					}
				}
			}
		default: // UnmarshalJSON refuses unknown ops; a struct built in code may still hold one
			return out, fmt.Errorf("%s: op %q is not one this fw understands (%s)", where, s.Op, strings.Join(StepOps(), ", "))
		}
	}
	if domain != DomainFloat {
		return out, fmt.Errorf("preprocessing.image.steps must turn the picture into a float tensor: add to_tensor (or to_image and to_dtype)")
	}
	if h == 0 || w == 0 {
		return out, fmt.Errorf("preprocessing.image.steps end in a size that depends on the picture's aspect ratio; end with center_crop or a resize to [height, width]")
	}
	return StepsSummary{Channels: channels, Height: h, Width: w}, nil
}

func sideOK(n int) bool { return n >= 1 && n <= MaxImageStepSide }

// checkResize validates one resize step in its domain.
func checkResize(s ImageStep, domain string) error {
	switch len(s.Size) {
	case 0:
		if s.MaxSize == nil {
			return fmt.Errorf("size is missing: give [shorter side], [height, width], or max_size alone")
		}
	case 1, 2:
		for _, n := range s.Size {
			if !sideOK(n) {
				return fmt.Errorf("size %v: each side must be 1..%d", s.Size, MaxImageStepSide)
			}
		}
		if len(s.Size) == 2 && s.MaxSize != nil {
			return fmt.Errorf("max_size only goes with a one-number size (the shorter side)")
		}
	default:
		return fmt.Errorf("size must have 1 or 2 numbers, got %v", s.Size)
	}
	if s.MaxSize != nil {
		if !sideOK(*s.MaxSize) {
			return fmt.Errorf("max_size must be 1..%d, got %d", MaxImageStepSide, *s.MaxSize)
		}
		if len(s.Size) == 1 && *s.MaxSize <= s.Size[0] {
			return fmt.Errorf("max_size %d must be larger than the size %d", *s.MaxSize, s.Size[0])
		}
	}
	if s.Antialias == nil {
		return fmt.Errorf("antialias (true or false) is missing")
	}
	aa := *s.Antialias
	nearest := s.Interpolation == "nearest" || s.Interpolation == "nearest-exact"
	switch domain {
	case DomainPIL:
		switch s.Interpolation {
		case "nearest", "bilinear", "bicubic", "box", "hamming", "lanczos":
		default:
			return fmt.Errorf(`interpolation %q is not one Pillow resizes a PIL image with here (nearest, bilinear, bicubic, box, hamming, lanczos)`, s.Interpolation)
		}
		if aa == nearest {
			return fmt.Errorf("antialias must be %v for %s on a PIL image (Pillow antialiases every filter but nearest)", !nearest, s.Interpolation)
		}
	case DomainUint8:
		switch s.Interpolation {
		case "nearest", "nearest-exact", "bilinear", "bicubic":
		default:
			return fmt.Errorf(`interpolation %q is not one PyTorch resizes a uint8 tensor with (nearest, nearest-exact, bilinear, bicubic)`, s.Interpolation)
		}
		if nearest && aa {
			return fmt.Errorf("antialias must be false for %s", s.Interpolation)
		}
	}
	return nil
}

// validateSteps checks preprocessing.image.steps against the format version
// and the recipe's declared output.
func (m *Metadata) validateSteps(im *ImagePreprocessing) error {
	if im.Steps == nil {
		return nil
	}
	if m.FormatVersion < ImageStepsFormatVersion {
		return fmt.Errorf("preprocessing.image.steps needs fw_format %d (a version-1 reader would ignore them), got %d", ImageStepsFormatVersion, m.FormatVersion)
	}
	sum, err := im.CheckSteps()
	if err != nil {
		return err
	}
	if sum.Channels != im.Channels || sum.Height != im.Height || sum.Width != im.Width {
		return fmt.Errorf("preprocessing.image.steps produce %d channel(s) of %dx%d but the recipe declares channels %d, %dx%d", sum.Channels, sum.Height, sum.Width, im.Channels, im.Height, im.Width)
	}
	return nil
}

// maxImageCaseB64 bounds the sample picture of test_vector.image.
const maxImageCaseB64 = 8 << 20

// ImageTestCase is test_vector.image: one sample picture, the tensor the
// model's preprocessing makes of it (as the user's Python pipeline computed
// it at export) and the model's outputs for that tensor. fw verify and the
// server's warm-up run the picture through fw's own image path and compare
// both, so a preprocessing recipe that does not reproduce the user's
// transform is caught before any request.
type ImageTestCase struct {
	// ImageB64 is the encoded picture (a PNG), base64.
	ImageB64 string `json:"image_b64"`
	// Input is the preprocessed picture, shaped like the first input with a
	// batch of 1.
	Input EncodedTensor `json:"input"`
	// InputAtol is the largest absolute difference allowed between fw's
	// preprocessing and Input.
	InputAtol float64 `json:"input_atol"`
	// Outputs are the model's outputs for Input, compared with the test
	// vector's atol and rtol.
	Outputs map[string]EncodedTensor `json:"outputs"`
}

func (m *Metadata) validateImageCase() error {
	if m.TestVector == nil || m.TestVector.Image == nil {
		return nil
	}
	c := m.TestVector.Image
	if m.Preprocessing == nil || m.Preprocessing.Image == nil {
		return fmt.Errorf("test_vector.image needs preprocessing.image")
	}
	if c.ImageB64 == "" || len(c.ImageB64) > maxImageCaseB64 {
		return fmt.Errorf("test_vector.image.image_b64 must be a base64 picture of at most %d characters", maxImageCaseB64)
	}
	if math.IsNaN(c.InputAtol) || math.IsInf(c.InputAtol, 0) || c.InputAtol < 0 {
		return fmt.Errorf("test_vector.image.input_atol must be a finite number >= 0, got %v", c.InputAtol)
	}
	if len(c.Outputs) == 0 {
		return fmt.Errorf("test_vector.image.outputs must list the model's outputs for the sample picture")
	}
	return nil
}
