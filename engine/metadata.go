package engine

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
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
//
// The test vector's base64 tensors and sample picture are nearly all of a
// document (82 of a small image model's 85 KB), and reading it wholly with
// encoding/json walked it byte by byte about six times (validation,
// decoding, again for the pass-through copy): a third of a small model's
// load, the CPU an on-demand load takes from the models serving beside it.
// Now encoding/json only validates it (json.Valid: the same syntax rules
// as before, iterative, so no nesting exhausts the stack), fastjson splits
// it (at most 300 levels deep, and a bounded number of values: every value
// is a node in memory), the test vector is read from that parse
// (decodeTestVector) and only the small rest goes through encoding/json,
// into the struct and into the pass-through copy.
func ParseMetadata(doc []byte) (*Metadata, error) {
	if !json.Valid(doc) {
		var x any
		err := json.Unmarshal(doc, &x) // says where
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	if n := bytes.Count(doc, []byte{','}) + bytes.Count(doc, []byte{':'}); n > maxMetadataValues {
		return nil, fmt.Errorf("parse %s: more than %d values (fw.export writes a few hundred)", MetadataKey, maxMetadataValues)
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(doc)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	obj, err := v.Object()
	if err != nil {
		return nil, fmt.Errorf("parse %s: the document must be a JSON object, not %s", MetadataKey, v.Type())
	}
	// Every member but the test vector, as a document of its own (members
	// in their order, so the last of a repeated name wins as before).
	rest := make([]byte, 0, 4096)
	rest = append(rest, '{')
	var tvs []*fastjson.Value // test_vector (matched as encoding/json would, in any case)
	obj.Visit(func(k []byte, fv *fastjson.Value) {
		if strings.EqualFold(string(k), "test_vector") {
			tvs = append(tvs, fv)
			return
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		rest = appendJSONString(rest, k)
		rest = append(rest, ':')
		rest = fv.MarshalTo(rest)
	})
	rest = append(rest, '}')
	var m Metadata
	if err := json.Unmarshal(rest, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	if err := json.Unmarshal(rest, &m.raw); err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetadataKey, err)
	}
	for _, tv := range tvs { // a repeated member decodes into what the one before left
		if m.TestVector, err = decodeTestVector(tv, m.TestVector); err != nil {
			return nil, fmt.Errorf("parse %s: test_vector: %w", MetadataKey, err)
		}
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", MetadataKey, err)
	}
	return &m, nil
}

// maxMetadataValues bounds the members and elements of an fw.json document
// (counted as its commas and colons, strings' included): fastjson keeps a
// node for each. Labels are the largest list fw.export writes.
const maxMetadataValues = 1 << 20

// appendJSONString appends s as a JSON string.
func appendJSONString(dst, s []byte) []byte {
	q, _ := json.Marshal(string(s)) // a string always marshals
	return append(dst, q...)
}

// decodeTestVector reads a TestVector from its parsed value into tv (nil:
// a new one) as encoding/json would: members matched to fields case-insensitively, the
// last of a repeated one winning, unknown ones ignored, null leaving a
// field empty, a value of the wrong type an error.
func decodeTestVector(v *fastjson.Value, tv *TestVector) (*TestVector, error) {
	if v.Type() == fastjson.TypeNull {
		return nil, nil
	}
	if tv == nil {
		tv = &TestVector{}
	}
	err := visitFields(v, func(k string, f *fastjson.Value) (err error) {
		switch {
		case strings.EqualFold(k, "inputs"):
			tv.Inputs, err = decodeTensors(f, tv.Inputs)
		case strings.EqualFold(k, "outputs"):
			tv.Outputs, err = decodeTensors(f, tv.Outputs)
		case strings.EqualFold(k, "atol"):
			err = decodeFloat(f, &tv.Atol)
		case strings.EqualFold(k, "rtol"):
			err = decodeFloat(f, &tv.Rtol)
		case strings.EqualFold(k, "image"):
			tv.Image, err = decodeImageCase(f, tv.Image)
		}
		return err
	})
	return tv, err
}

func decodeImageCase(v *fastjson.Value, c *ImageTestCase) (*ImageTestCase, error) {
	if v.Type() == fastjson.TypeNull {
		return nil, nil
	}
	if c == nil {
		c = &ImageTestCase{}
	}
	err := visitFields(v, func(k string, f *fastjson.Value) (err error) {
		switch {
		case strings.EqualFold(k, "image_b64"):
			err = decodeString(f, &c.ImageB64)
		case strings.EqualFold(k, "input"):
			err = decodeTensor(f, &c.Input)
		case strings.EqualFold(k, "input_atol"):
			err = decodeFloat(f, &c.InputAtol)
		case strings.EqualFold(k, "outputs"):
			c.Outputs, err = decodeTensors(f, c.Outputs)
		}
		return err
	})
	return c, err
}

// decodeTensors reads a map of tensors by name; members are added to m as
// encoding/json adds them to an existing map.
func decodeTensors(v *fastjson.Value, m map[string]EncodedTensor) (map[string]EncodedTensor, error) {
	if v.Type() == fastjson.TypeNull {
		return nil, nil
	}
	if m == nil && v.Type() == fastjson.TypeObject {
		m = map[string]EncodedTensor{} // {} is an empty map, not none
	}
	err := visitFields(v, func(k string, f *fastjson.Value) error {
		var t EncodedTensor // a map's element starts from zero, as in encoding/json
		if err := decodeTensor(f, &t); err != nil {
			return err
		}
		m[k] = t
		return nil
	})
	return m, err
}

func decodeTensor(v *fastjson.Value, t *EncodedTensor) error {
	return visitFields(v, func(k string, f *fastjson.Value) error {
		switch {
		case strings.EqualFold(k, "dtype"):
			return decodeString(f, &t.DType)
		case strings.EqualFold(k, "b64"):
			return decodeString(f, &t.B64)
		case strings.EqualFold(k, "shape"):
			if f.Type() == fastjson.TypeNull {
				t.Shape = nil
				return nil
			}
			a, err := f.Array()
			if err != nil {
				return fmt.Errorf("shape: %w", err)
			}
			old := t.Shape // a repeated shape: null elements keep the earlier ones, as encoding/json's do
			t.Shape = make([]int64, len(a))
			copy(t.Shape, old[:min(len(a), len(old))])
			for i, d := range a {
				if d.Type() == fastjson.TypeNull {
					continue // null leaves the zero
				}
				if t.Shape[i], err = d.Int64(); err != nil {
					return fmt.Errorf("shape: %w", err)
				}
			}
		}
		return nil
	})
}

// visitFields calls f for each member of object v in order (nothing for
// null), stopping at the first error, which it returns naming the member.
func visitFields(v *fastjson.Value, f func(k string, v *fastjson.Value) error) error {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		return err
	}
	o.Visit(func(k []byte, fv *fastjson.Value) {
		if err == nil {
			if err = f(string(k), fv); err != nil {
				err = fmt.Errorf("%s: %w", k, err)
			}
		}
	})
	return err
}

func decodeString(v *fastjson.Value, s *string) error {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	b, err := v.StringBytes()
	if err != nil {
		return err
	}
	*s = string(b)
	return nil
}

// decodeFloat reads a number as encoding/json does (strconv.ParseFloat:
// correctly rounded, out of float64's range an error).
func decodeFloat(v *fastjson.Value, x *float64) error {
	if v.Type() == fastjson.TypeNull {
		return nil
	}
	if v.Type() != fastjson.TypeNumber {
		return fmt.Errorf("value doesn't contain number; it contains %s", v.Type())
	}
	f, err := strconv.ParseFloat(v.String(), 64)
	if err != nil {
		return err
	}
	*x = f
	return nil
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
