package imageprep

import (
	"errors"
	"fmt"
	"image"
	"strconv"
	"sync"

	"github.com/fw-serve/fw/engine"
)

// Pipeline is a model's preprocessing.image recipe, checked and compiled
// once (when the model loads) and then used by every request: the simple
// form (Options may override it per request) or the steps form (the user's
// torchvision transform). It keeps the buffers of finished pictures for the
// next ones, and is safe for concurrent use.
type Pipeline struct {
	recipe engine.ImagePreprocessing
	prog   *program // nil for the simple form
	pool   sync.Pool
}

// Compile checks p and prepares it. An invalid recipe gives an error that
// names the field at fault.
func Compile(p engine.ImagePreprocessing) (*Pipeline, error) {
	pl := &Pipeline{recipe: p}
	pl.pool.New = func() any { return new(workspace) }
	if p.Steps == nil {
		if _, err := resolve(p, Options{}); err != nil {
			return nil, err
		}
		return pl, nil
	}
	prog, err := compileSteps(p)
	if err != nil {
		return nil, err
	}
	pl.prog = prog
	return pl, nil
}

// Recipe returns the recipe the pipeline was compiled from.
func (pl *Pipeline) Recipe() engine.ImagePreprocessing { return pl.recipe }

// HasSteps reports whether the recipe is the steps form.
func (pl *Pipeline) HasSteps() bool { return pl.prog != nil }

// SampleShape is SampleShape of the recipe.
func (pl *Pipeline) SampleShape(o Options) []int64 { return SampleShape(pl.recipe, o) }

// stepsOptionsError refuses per-request overrides of a steps recipe.
func stepsOptionsError(o Options) error {
	field, value := "", ""
	switch {
	case o.Height != 0:
		field, value = "height", strconv.Itoa(o.Height)
	case o.Width != 0:
		field, value = "width", strconv.Itoa(o.Width)
	case o.Channels != 0:
		field, value = "channels", strconv.Itoa(o.Channels)
	case o.Resize != "":
		field, value = "resize", o.Resize
	case o.Invert != nil:
		field, value = "invert", strconv.FormatBool(*o.Invert)
	default:
		return nil
	}
	return &OptionsError{field, value, "this model's preprocessing is its own torchvision transform (preprocessing.image.steps), which per-request overrides cannot change; drop the parameter"}
}

// Preprocess is the package's Preprocess with this pipeline's recipe.
func (pl *Pipeline) Preprocess(img image.Image, o Options, dst []float32) error {
	if pl.prog == nil {
		return Preprocess(img, pl.recipe, o, dst)
	}
	return pl.preprocess(img, o, DefaultMaxPixels, dst)
}

func (pl *Pipeline) preprocess(img image.Image, o Options, maxPixels int64, dst []float32) error {
	if err := stepsOptionsError(o); err != nil {
		return err
	}
	pr := pl.prog
	if want := pr.c * pr.h * pr.w; len(dst) != want {
		return fmt.Errorf("imageprep: dst holds %d values, the recipe needs %d (channels %d x %dx%d)", len(dst), want, pr.c, pr.h, pr.w)
	}
	ws := pl.pool.Get().(*workspace)
	err := pr.run(ws, img, maxPixels, dst)
	ws.src = nil // do not keep the picture alive in the pool
	pl.pool.Put(ws)
	return err
}

// Batch is the package's Batch with this pipeline's recipe.
func (pl *Pipeline) Batch(images [][]byte, o Options, lim Limits) (engine.Tensor, error) {
	if pl.prog == nil {
		return Batch(images, pl.recipe, o, lim)
	}
	if err := stepsOptionsError(o); err != nil {
		return engine.Tensor{}, err
	}
	if len(images) == 0 {
		return engine.Tensor{}, errors.New("imageprep: no images in the batch; send at least one")
	}
	pr := pl.prog
	per := pr.c * pr.h * pr.w
	if int64(len(images))*int64(per) > maxBatchElements {
		return engine.Tensor{}, fmt.Errorf("imageprep: %d images of %d values each is more than %d values; send fewer images per request", len(images), per, maxBatchElements)
	}
	shape := append([]int64{int64(len(images))}, SampleShape(pl.recipe, Options{})...)
	t, err := engine.NewTensor(engine.Float32, shape)
	if err != nil {
		return engine.Tensor{}, fmt.Errorf("imageprep: %w", err)
	}
	vals := t.Float32s()
	for i, data := range images {
		img, _, err := Decode(data, lim)
		if err != nil {
			return engine.Tensor{}, &BatchError{Index: i, Err: err}
		}
		if err := pl.preprocess(img, Options{}, lim.maxPixels(), vals[i*per:(i+1)*per]); err != nil {
			return engine.Tensor{}, &BatchError{Index: i, Err: err}
		}
	}
	return t, nil
}
