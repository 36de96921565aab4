package imageprep

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"

	"github.com/fw-serve/fw/engine"
)

// ErrNoImageTestCase is returned by VerifyImage for model files whose test
// vector has no image case.
var ErrNoImageTestCase = errors.New("the model file's test vector has no image case (export it with fw.export and preprocessing= to embed one)")

// ImageCheck is the outcome of a model's image test case.
type ImageCheck struct {
	Format        string // the sample picture's format ("png")
	Width, Height int    // and size
	// InputMaxAbsError is the largest difference between fw's preprocessed
	// tensor and the one the user's Python pipeline made; InputAtol bounds it.
	InputMaxAbsError float64
	InputAtol        float64
	// OutputMaxAbsError is the largest difference between the model's
	// outputs on fw's tensor and the outputs recorded at export, bounded by
	// |got - want| <= Atol + Rtol*|want|.
	OutputMaxAbsError float64
	Atol, Rtol        float64
	Passed            bool
	// Worst says where the check failed (empty when it passed).
	Worst string
}

// VerifyImage runs the image test case embedded in m's metadata through
// fw's whole image path: the sample picture is decoded (Decode), turned
// into a tensor by pl (or, when pl is nil, by the model's own recipe) and
// compared with the tensor the user's Python pipeline made of it, then the
// model runs on fw's tensor and its outputs are compared with the ones
// recorded at export. A recipe that does not reproduce the user's transform
// fails here, before any request. Files without an image case give
// ErrNoImageTestCase.
//
// cache, when not nil, keeps the decoded and preprocessed sample across
// loads (SampleCache); nil decodes it every time.
func VerifyImage(ctx context.Context, m *engine.Model, pl *Pipeline, cache *SampleCache) (*ImageCheck, error) {
	if m.Meta == nil || m.Meta.TestVector == nil || m.Meta.TestVector.Image == nil {
		return nil, ErrNoImageTestCase
	}
	tv := m.Meta.TestVector
	c := tv.Image
	atol, rtol := m.Tolerance()
	if pl == nil {
		if m.Meta.Preprocessing == nil || m.Meta.Preprocessing.Image == nil {
			return nil, errors.New("test_vector.image needs preprocessing.image")
		}
		var err error
		if pl, err = Compile(*m.Meta.Preprocessing.Image); err != nil {
			return nil, fmt.Errorf("image test case: %w", err)
		}
	}
	want, err := c.Input.Decode()
	if err != nil {
		return nil, fmt.Errorf("image test case input: %w", err)
	}
	sample := engine.NumElements(pl.SampleShape(Options{}))
	if len(want.Shape) == 0 || want.Shape[0] != 1 || engine.NumElements(want.Shape) != sample {
		return nil, fmt.Errorf("image test case input has shape %s, not one sample of %s", engine.FormatShape(want.Shape), engine.FormatShape(pl.SampleShape(Options{})))
	}
	x, err := engine.NewTensor(engine.Float32, want.Shape)
	if err != nil {
		return nil, fmt.Errorf("image test case: %w", err)
	}
	s, err := preprocessSample(pl, c.ImageB64, x.Float32s(), cache)
	if err != nil {
		return nil, err
	}
	res := &ImageCheck{Format: s.format, Width: s.width, Height: s.height, InputAtol: c.InputAtol, Atol: atol, Rtol: rtol, Passed: true}
	got := x.Float32s()
	for i := range got {
		d := math.Abs(float64(got[i]) - want.At(i))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		if d > res.InputMaxAbsError {
			res.InputMaxAbsError = d
			if d > c.InputAtol {
				res.Passed = false
				res.Worst = fmt.Sprintf("preprocessed value %d: fw %g, the Python pipeline %g (|diff| %.3g > input_atol %g): the recipe does not reproduce the transform the model was exported with", i, got[i], want.At(i), d, c.InputAtol)
			}
		}
	}
	specs := m.Inputs()
	if len(specs) != 1 {
		return nil, fmt.Errorf("image test case: the model takes %d inputs; the image path serves single-input models", len(specs))
	}
	if s := specs[0].Shape; len(s) > 0 && len(s) != len(x.Shape) {
		x.Shape = append([]int64{1}, engine.NumElements(x.Shape[1:]))
	}
	out, err := m.Run(ctx, []engine.Tensor{x})
	if err != nil {
		return nil, fmt.Errorf("image test case: run the model on the sample picture: %w", err)
	}
	worstExcess := math.Inf(-1)
	for i, spec := range m.Outputs() {
		enc, ok := c.Outputs[spec.Name]
		if !ok {
			continue
		}
		w, err := enc.Decode()
		if err != nil {
			return nil, fmt.Errorf("image test case output %q: %w", spec.Name, err)
		}
		if i >= len(out) || engine.NumElements(out[i].Shape) != engine.NumElements(w.Shape) {
			return nil, fmt.Errorf("image test case output %q: the model returned another shape than recorded %s", spec.Name, engine.FormatShape(w.Shape))
		}
		for j, n := 0, w.Len(); j < n; j++ {
			g, wv := out[i].At(j), w.At(j)
			d := math.Abs(g - wv)
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			res.OutputMaxAbsError = max(res.OutputMaxAbsError, d)
			excess := d - (atol + rtol*math.Abs(wv))
			if excess > 0 {
				res.Passed = false
				// A preprocessing mismatch explains the outputs; name it, not them.
				if excess > worstExcess && res.InputMaxAbsError <= c.InputAtol {
					worstExcess = excess
					res.Worst = fmt.Sprintf("%s[%d] for the sample picture: got %g, want %g", spec.Name, j, g, wv)
				}
			}
		}
	}
	return res, nil
}

// preprocessSample fills x with what pl makes of the base64 picture, from
// cache when it holds it (x must have the sample's size).
func preprocessSample(pl *Pipeline, imageB64 string, x []float32, cache *SampleCache) (*sample, error) {
	key, keyed := sampleKey(pl.recipe, imageB64)
	if keyed {
		if s := cache.get(key); s != nil && len(s.x) == len(x) {
			copy(x, s.x)
			return s, nil
		}
	}
	data, err := base64.StdEncoding.DecodeString(imageB64)
	if err != nil {
		return nil, fmt.Errorf("image test case: the sample picture is not valid base64: %w", err)
	}
	img, format, err := Decode(data, Limits{})
	if err != nil {
		return nil, fmt.Errorf("image test case: %w", err)
	}
	if err := pl.Preprocess(img, Options{}, x); err != nil {
		return nil, fmt.Errorf("image test case: preprocess the sample picture: %w", err)
	}
	b := img.Bounds()
	s := &sample{key: key, format: format, width: b.Dx(), height: b.Dy(), x: append([]float32(nil), x...)}
	if keyed {
		cache.put(s)
	}
	return s, nil
}
