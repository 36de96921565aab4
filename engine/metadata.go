package engine

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
)

// MetadataKey is the name of fw's metadata document inside a model file: the
// ONNX metadata_props key and the TorchScript extra file name.
const MetadataKey = "fw.json"

// MetadataFormatVersion is the newest fw.json format this reader understands.
// Version 2 is version 1 plus preprocessing.image.steps (ImageStepsFormatVersion).
const MetadataFormatVersion = 2

var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Metadata is fw.json, the self-description an exported model file carries
// (docs/model-format.md). Fields this version does not know are kept in Raw.
type Metadata struct {
	FormatVersion int            `json:"fw_format"`
	Name          string         `json:"name"`
	Version       string         `json:"version"`
	Description   string         `json:"description,omitempty"`
	Task          string         `json:"task,omitempty"`
	Format        string         `json:"format,omitempty"`
	Inputs        []SpecJSON     `json:"inputs"`
	Outputs       []SpecJSON     `json:"outputs"`
	Labels        []string       `json:"labels,omitempty"`
	Preprocessing *Preprocessing `json:"preprocessing,omitempty"`
	Export        map[string]any `json:"export,omitempty"`
	TorchVersion  string         `json:"torch_version,omitempty"`
	CreatedAt     string         `json:"created_at,omitempty"`
	Metrics       map[string]any `json:"metrics,omitempty"`
	TestVector    *TestVector    `json:"test_vector,omitempty"`
	raw           map[string]any // the whole document, for pass-through
}

// SpecJSON is an input or output as fw.json writes it.
type SpecJSON struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Preprocessing says how /predict/image turns a picture into the first input.
type Preprocessing struct {
	Image *ImagePreprocessing `json:"image,omitempty"`
}

// ImagePreprocessing is the image recipe of docs/model-format.md.
type ImagePreprocessing struct {
	Height   int       `json:"height"`
	Width    int       `json:"width"`
	Channels int       `json:"channels"`
	Layout   string    `json:"layout,omitempty"`
	Resize   string    `json:"resize,omitempty"`
	Scale    float64   `json:"scale,omitempty"`
	Mean     []float64 `json:"mean,omitempty"`
	Std      []float64 `json:"std,omitempty"`
	Invert   bool      `json:"invert,omitempty"`
	Flatten  bool      `json:"flatten,omitempty"`
	// Steps, when present, replace Resize, Scale, Mean, Std and Invert: the
	// user's torchvision eval transform, step by step (imagesteps.go).
	Steps []ImageStep `json:"steps,omitempty"`
}

// TestVector holds example inputs and the outputs PyTorch gave for them.
type TestVector struct {
	Inputs  map[string]EncodedTensor `json:"inputs"`
	Outputs map[string]EncodedTensor `json:"outputs"`
	Atol    float64                  `json:"atol"`
	Rtol    float64                  `json:"rtol"`
	// Image, when present, checks the whole image path: a sample picture,
	// what preprocessing must make of it and what the model then outputs.
	Image *ImageTestCase `json:"image,omitempty"`
}

// EncodedTensor is a tensor in fw.json: little-endian raw bytes in base64.
type EncodedTensor struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	B64   string  `json:"b64"`
}

// Decode turns the encoded tensor into a Tensor, checking its size.
func (e EncodedTensor) Decode() (Tensor, error) {
	dt, err := ParseDType(e.DType)
	if err != nil {
		return Tensor{}, err
	}
	if dt == String {
		return Tensor{}, fmt.Errorf("a test vector holds numbers; %s tensors cannot be one", dt)
	}
	raw, err := base64.StdEncoding.DecodeString(e.B64)
	if err != nil {
		return Tensor{}, fmt.Errorf("decode base64: %w", err)
	}
	for _, d := range e.Shape {
		if d < 0 {
			return Tensor{}, fmt.Errorf("test tensor shape %v has a negative axis", e.Shape)
		}
	}
	want := NumElements(e.Shape) * int64(dt.Size())
	if int64(len(raw)) != want {
		return Tensor{}, fmt.Errorf("test tensor of shape %v and dtype %s needs %d bytes, has %d", e.Shape, dt, want, len(raw))
	}
	t, err := NewTensor(dt, e.Shape)
	if err != nil {
		return Tensor{}, err
	}
	copy(t.Data, raw)
	return t, nil
}

// ParseMetadata decodes and validates an fw.json document.
func ParseMetadata(doc []byte) (*Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	// The pass-through copy leaves out the test vector (Raw never returns
	// it): decoding its base64 into a second generic copy was most of a
	// small model's load.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	delete(fields, "test_vector")
	m.raw = make(map[string]any, len(fields))
	for k, v := range fields {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", MetadataKey, k, err)
		}
		m.raw[k] = x
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", MetadataKey, err)
	}
	return &m, nil
}

// Raw returns the whole fw.json document as parsed, unknown fields included,
// without the (possibly large) test vector.
func (m *Metadata) Raw() map[string]any {
	out := make(map[string]any, len(m.raw))
	for k, v := range m.raw {
		out[k] = v
	}
	return out
}

func (m *Metadata) validate() error {
	if m.FormatVersion < 1 {
		return fmt.Errorf("fw_format must be a positive integer, got %d", m.FormatVersion)
	}
	if m.FormatVersion > MetadataFormatVersion {
		return fmt.Errorf("fw_format %d is newer than this fw understands (%d); upgrade fw", m.FormatVersion, MetadataFormatVersion)
	}
	if !modelNameRE.MatchString(m.Name) {
		return fmt.Errorf("name %q must match %s", m.Name, modelNameRE)
	}
	if len(m.Version) > 64 {
		return fmt.Errorf("version is longer than 64 characters")
	}
	if len(m.Inputs) == 0 || len(m.Outputs) == 0 {
		return fmt.Errorf("inputs and outputs must both be listed")
	}
	for _, group := range [][]SpecJSON{m.Inputs, m.Outputs} {
		for _, s := range group {
			if s.Name == "" {
				return fmt.Errorf("every input and output needs a name")
			}
			if _, err := ParseDType(s.DType); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			for _, d := range s.Shape {
				if d < -1 || d == 0 {
					return fmt.Errorf("%s: shape %v: axes are positive or -1 (dynamic)", s.Name, s.Shape)
				}
			}
		}
	}
	if p := m.Preprocessing; p != nil && p.Image != nil {
		im := p.Image
		if im.Height <= 0 || im.Width <= 0 || im.Height*im.Width > 1<<26 {
			return fmt.Errorf("preprocessing.image: height and width must be positive, got %dx%d", im.Height, im.Width)
		}
		if im.Channels != 1 && im.Channels != 3 {
			return fmt.Errorf("preprocessing.image.channels must be 1 or 3, got %d", im.Channels)
		}
		for _, s := range im.Std {
			if s == 0 || math.IsNaN(s) {
				return fmt.Errorf("preprocessing.image.std must not contain 0")
			}
		}
		if err := m.validateSteps(im); err != nil {
			return err
		}
	}
	if err := m.validateImageCase(); err != nil {
		return err
	}
	return nil
}

// Specs converts fw.json's specs to TensorSpecs.
func specsFromJSON(in []SpecJSON) []TensorSpec {
	out := make([]TensorSpec, len(in))
	for i, s := range in {
		dt, _ := ParseDType(s.DType) // validated by ParseMetadata
		out[i] = TensorSpec{Name: s.Name, DType: dt, Shape: append([]int64(nil), s.Shape...)}
	}
	return out
}
