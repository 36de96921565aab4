package imageprep

import (
	"errors"
	"fmt"
	"image"
	"math"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
)

// MaxOutputPixels caps Height*Width of the produced sample, the same bound
// fw.json validation puts on preprocessing.image.
const MaxOutputPixels = 1 << 26

// maxBatchElements caps the float32 values Batch allocates (1 GiB).
const maxBatchElements = 1 << 28

// maxSourceSide refuses images with absurd bounds (image.Uniform and the
// like) that never came out of Decode.
const maxSourceSide = 1 << 24

// Options are per-request overrides of the model's recipe, parsed by the HTTP
// layer from query parameters. Zero values (and a nil Invert) keep the
// recipe's setting. Invalid values give an *OptionsError (HTTP 400).
type Options struct {
	Height   int    // output height in pixels; 0 keeps the recipe's
	Width    int    // output width in pixels; 0 keeps the recipe's
	Channels int    // 1 (grayscale) or 3 (RGB); 0 keeps the recipe's
	Resize   string // "bilinear" or "nearest"; "" keeps the recipe's
	Invert   *bool  // nil keeps the recipe's
}

// OptionsError reports an invalid per-request override (Options). The HTTP
// layer answers 400 and can name Field as the query parameter at fault.
type OptionsError struct {
	Field  string // "height", "width", "channels" or "resize"
	Value  string // the value as given
	Reason string // what a valid value looks like
}

// Error names the field, the bad value and what is allowed.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("invalid %s=%s: %s", e.Field, e.Value, e.Reason)
}

// BatchError reports which image of a Batch failed. Err is the *FormatError,
// *TooLargeError or other error for that image; errors.As sees through it.
type BatchError struct {
	Index int // 0-based position of the image in the request
	Err   error
}

// Error names the failing image's index.
func (e *BatchError) Error() string { return fmt.Sprintf("image %d: %v", e.Index, e.Err) }

// Unwrap returns the error for that image.
func (e *BatchError) Unwrap() error { return e.Err }

// recipe is an ImagePreprocessing with the Options applied and checked.
type recipe struct {
	h, w, c int
	nearest bool
	flatten bool
	// out = v*a[c] + b[c], v the resized 0..255 value: invert, scale, mean
	// and std folded into one multiply-add per value.
	a, b [3]float32
}

// resolve applies o to p and checks the result.
func resolve(p engine.ImagePreprocessing, o Options) (recipe, error) {
	r := recipe{h: p.Height, w: p.Width, c: p.Channels, flatten: p.Flatten}
	if o.Height != 0 {
		if o.Height < 0 {
			return r, &OptionsError{"height", strconv.Itoa(o.Height), "must be a positive number of pixels"}
		}
		r.h = o.Height
	}
	if o.Width != 0 {
		if o.Width < 0 {
			return r, &OptionsError{"width", strconv.Itoa(o.Width), "must be a positive number of pixels"}
		}
		r.w = o.Width
	}
	if o.Channels != 0 {
		if o.Channels != 1 && o.Channels != 3 {
			return r, &OptionsError{"channels", strconv.Itoa(o.Channels), "must be 1 (grayscale) or 3 (RGB)"}
		}
		r.c = o.Channels
	}
	resize := p.Resize
	if o.Resize != "" {
		if !validResize(o.Resize) {
			return r, &OptionsError{"resize", o.Resize, `must be "bilinear" or "nearest"`}
		}
		resize = o.Resize
	}
	invert := p.Invert
	if o.Invert != nil {
		invert = *o.Invert
	}

	if r.h <= 0 || r.w <= 0 {
		return r, fmt.Errorf("preprocessing.image: height and width must be positive, got %dx%d; fix the model's fw.json or pass height and width", r.h, r.w)
	}
	if pixelsOver(r.w, r.h, MaxOutputPixels) {
		if o.Height != 0 || o.Width != 0 {
			return r, sizeOptionsError(o, r, MaxOutputPixels)
		}
		return r, fmt.Errorf("preprocessing.image: %dx%d is more than %d pixels; fix the model's fw.json", r.h, r.w, MaxOutputPixels)
	}
	if r.c != 1 && r.c != 3 {
		return r, fmt.Errorf("preprocessing.image.channels must be 1 or 3, got %d; fix the model's fw.json", r.c)
	}
	if p.Layout != "" && !strings.EqualFold(p.Layout, "NCHW") {
		return r, fmt.Errorf("preprocessing.image.layout %q is not supported; only NCHW is", p.Layout)
	}
	if !validResize(resize) && resize != "" {
		return r, fmt.Errorf(`preprocessing.image.resize %q is not supported; use "bilinear" or "nearest"`, resize)
	}
	r.nearest = strings.EqualFold(resize, "nearest")

	scale := p.Scale
	if scale == 0 {
		scale = 1.0 / 255
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return r, fmt.Errorf("preprocessing.image.scale must be a finite number, got %v", scale)
	}
	mean, err := perChannel("mean", p.Mean, 0, r.c)
	if err != nil {
		return r, err
	}
	std, err := perChannel("std", p.Std, 1, r.c)
	if err != nil {
		return r, err
	}
	for c := 0; c < r.c; c++ {
		if std[c] == 0 || math.IsNaN(std[c]) || math.IsInf(std[c], 0) {
			return r, fmt.Errorf("preprocessing.image.std must be finite and non-zero, got %v; fix the model's fw.json", p.Std)
		}
		if math.IsNaN(mean[c]) || math.IsInf(mean[c], 0) {
			return r, fmt.Errorf("preprocessing.image.mean must be finite, got %v; fix the model's fw.json", p.Mean)
		}
		a := scale / std[c]
		b := -mean[c] / std[c]
		if invert { // (255-v)*a + b
			b += 255 * a
			a = -a
		}
		r.a[c], r.b[c] = float32(a), float32(b)
	}
	return r, nil
}

// sizeOptionsError refuses an output size over max pixels set by a height
// or width override, naming the override at fault.
func sizeOptionsError(o Options, r recipe, max int64) *OptionsError {
	field, value := "height", fmt.Sprintf("%d (width %d)", r.h, r.w)
	if o.Height == 0 || (o.Width != 0 && r.w > r.h) {
		field, value = "width", fmt.Sprintf("%d (height %d)", r.w, r.h)
	}
	return &OptionsError{field, value, fmt.Sprintf("height*width must be at most %d pixels; ask for a smaller output size (the model's own input size needs no override)", max)}
}

func validResize(s string) bool {
	return strings.EqualFold(s, "bilinear") || strings.EqualFold(s, "nearest")
}

// perChannel broadcasts a mean or std list to c channels.
func perChannel(name string, v []float64, def float64, c int) ([3]float64, error) {
	var out [3]float64
	switch len(v) {
	case 0:
		out = [3]float64{def, def, def}
	case 1:
		out = [3]float64{v[0], v[0], v[0]}
	case c:
		copy(out[:], v)
	default:
		return out, fmt.Errorf("preprocessing.image.%s has %d values but the image has %d channel(s); give 1 value or one per channel", name, len(v), c)
	}
	return out, nil
}

// SampleShape returns the per-sample shape the recipe (with o applied)
// produces: [C, H, W], or [C*H*W] when Flatten is set. It does not validate;
// Preprocess and Batch do.
func SampleShape(p engine.ImagePreprocessing, o Options) []int64 {
	h, w, c := p.Height, p.Width, p.Channels
	if o.Height > 0 {
		h = o.Height
	}
	if o.Width > 0 {
		w = o.Width
	}
	if o.Channels > 0 {
		c = o.Channels
	}
	if p.Flatten {
		return []int64{int64(c) * int64(h) * int64(w)}
	}
	return []int64{int64(c), int64(h), int64(w)}
}

// Preprocess turns img into one sample of the model's input, written into dst
// in NCHW order (channel planes of Height rows of Width values); len(dst) must
// be Channels*Height*Width. Flatten does not change the values, only the
// declared shape (SampleShape).
//
// The steps, in order:
//
//   - Channels: 3 gives R, G, B; 1 gives the luminance
//     L = (19595*R + 38470*G + 7471*B + 32768) >> 16 on 8-bit values, which is
//     Pillow's convert("L") (ITU-R 601-2). Transparent pixels are composited
//     over black (the colour is multiplied by alpha), which is what Go's
//     premultiplied image model stores; note Pillow's convert("RGB") instead
//     drops alpha, which differs only for partly transparent pixels. JPEG
//     YCbCr is converted to RGB first as libjpeg does it (what Pillow gives):
//     4:2:0 and 4:2:2 chroma upsampled with its "fancy" triangle filter and
//     its fixed-point colour conversion, also for grayscale output; only the
//     inverse DCT differs (Go's), by up to 2 levels on a few pixels. Values
//     stay on the 0..255 scale (16-bit sources give fractional values).
//   - Resize to Height x Width, computed straight into the output, matching
//     PyTorch's F.interpolate without antialiasing. "bilinear" uses
//     align_corners=False pixel centres: the source coordinate of output
//     index d is max((d+0.5)*in/out - 0.5, 0), interpolating between its
//     floor and the next index (clamped to the edge). "nearest" (PyTorch's
//     mode='nearest', not 'nearest-exact') takes source index
//     min(floor(d*in/out), in-1). An empty Resize means bilinear. Same-size
//     images are copied exactly.
//   - Invert (255 - v) when the recipe or Options ask for it.
//   - Multiply by Scale (0 means 1/255), then (x - mean[c]) / std[c], with a
//     single mean/std value broadcast to all channels and empty lists meaning
//     0 and 1. These steps are folded into one float32 multiply-add per value.
//
// The arithmetic is float32 with explicit rounding at every step, so results
// are the same on every run and platform. Invalid Options give an
// *OptionsError; an invalid recipe gives a plain error.
//
// A recipe with Steps is the steps form instead (docs/model-format.md): it is
// compiled (Compile) and run as its Pipeline does; Options other than zero
// are refused with an *OptionsError.
func Preprocess(img image.Image, p engine.ImagePreprocessing, o Options, dst []float32) error {
	if p.Steps != nil {
		pl, err := Compile(p)
		if err != nil {
			return err
		}
		return pl.Preprocess(img, o, dst)
	}
	r, err := resolve(p, o)
	if err != nil {
		return err
	}
	if want := r.c * r.h * r.w; len(dst) != want {
		return fmt.Errorf("imageprep: dst holds %d values, the recipe needs %d (channels %d x %dx%d)", len(dst), want, r.c, r.h, r.w)
	}
	return r.run(img, dst)
}

// Batch decodes and preprocesses images into one float32 tensor of shape
// [N, SampleShape...]. Images are handled one after another, so at most one
// decoded picture is held at a time. A failure is a *BatchError naming the
// index of the image at fault; errors.As finds the *FormatError or
// *TooLargeError inside. Invalid Options give an *OptionsError.
func Batch(images [][]byte, p engine.ImagePreprocessing, o Options, lim Limits) (engine.Tensor, error) {
	if p.Steps != nil {
		pl, err := Compile(p)
		if err != nil {
			return engine.Tensor{}, err
		}
		return pl.Batch(images, o, lim)
	}
	r, err := resolve(p, o)
	if err != nil {
		return engine.Tensor{}, err
	}
	// An override is request input: the output it asks for is bounded like
	// a source image, by the pixel limit.
	if max := lim.maxPixels(); (o.Height != 0 || o.Width != 0) && pixelsOver(r.w, r.h, max) {
		return engine.Tensor{}, sizeOptionsError(o, r, max)
	}
	if len(images) == 0 {
		return engine.Tensor{}, errors.New("imageprep: no images in the batch; send at least one")
	}
	per := r.c * r.h * r.w
	if int64(len(images))*int64(per) > maxBatchElements {
		return engine.Tensor{}, fmt.Errorf("imageprep: %d images of %d values each is more than %d values; send fewer images per request", len(images), per, maxBatchElements)
	}
	shape := append([]int64{int64(len(images))}, SampleShape(p, o)...)
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
		if err := r.run(img, vals[i*per:(i+1)*per]); err != nil {
			return engine.Tensor{}, &BatchError{Index: i, Err: err}
		}
	}
	return t, nil
}

// tap is where one output coordinate reads along one axis: two source
// indices and their weights (l1 == 0 for a point sample).
type tap struct {
	i0, i1 int32
	l0, l1 float32
}

// bilinearTaps mirrors PyTorch's area_pixel_compute_source_index and
// compute_source_index_and_lambda (align_corners=False), in float32.
func bilinearTaps(in int, out []tap) {
	n := len(out)
	scale := float32(in) / float32(n)
	for d := range out {
		src := float32(scale*(float32(d)+0.5)) - 0.5
		if src < 0 {
			src = 0
		}
		i0 := int(src)
		if i0 > in-1 {
			i0 = in - 1
		}
		l1 := min(max(src-float32(i0), 0), 1) // guard_index_and_lambda
		i1 := i0
		if i0 < in-1 {
			i1 = i0 + 1
		}
		out[d] = tap{int32(i0), int32(i1), 1 - l1, l1}
	}
}

// nearestTaps mirrors PyTorch's nearest_idx (mode='nearest').
func nearestTaps(in int, out []tap) {
	n := len(out)
	scale := float32(in) / float32(n)
	for d := range out {
		var i int
		switch {
		case n == in:
			i = d
		case n == 2*in:
			i = d >> 1
		default:
			i = int(math.Floor(float64(float32(float32(d) * scale))))
		}
		if i > in-1 {
			i = in - 1
		}
		out[d] = tap{int32(i), int32(i), 1, 0}
	}
}

// run resizes and normalises img into dst (len c*h*w, already checked).
func (r *recipe) run(img image.Image, dst []float32) error {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	if sw <= 0 || sh <= 0 {
		return errors.New("imageprep: the image is empty")
	}
	if sw > maxSourceSide || sh > maxSourceSide {
		return fmt.Errorf("imageprep: a %dx%d image is too large to preprocess; decode it with Decode, which enforces Limits", sw, sh)
	}
	c, w, h := r.c, r.w, r.h

	taps := make([]tap, w+h)
	xs, ys := taps[:w], taps[w:]
	if r.nearest {
		nearestTaps(sw, xs)
		nearestTaps(sh, ys)
	} else {
		bilinearTaps(sw, xs)
		bilinearTaps(sh, ys)
	}
	point := true // every weight is 1 or 0: sample, do not blend
	for _, t := range taps {
		if t.l1 != 0 {
			point = false
			break
		}
	}

	// Convert only the source columns some output reads, so the cost
	// follows the output size, not the width of a large picture: index maps
	// a source column to its slot in cols, and the x taps are rewritten to
	// slots.
	ints := make([]int32, sw+2*w)
	index, cols := ints[:sw], ints[sw:sw]
	for i := range index {
		index[i] = -1
	}
	for i := range xs {
		for _, p := range [2]*int32{&xs[i].i0, &xs[i].i1} {
			if index[*p] < 0 {
				index[*p] = int32(len(cols))
				cols = append(cols, *p)
			}
			*p = index[*p]
		}
	}

	src := newRowSource(img, c)
	cache := rowCache{src: &src, cols: cols, rowLen: len(cols) * c}
	cache.init()

	hw := h * w
	for oy, ty := range ys {
		if point {
			row, _ := cache.get2(int(ty.i0), int(ty.i0))
			for ch := 0; ch < c; ch++ {
				plane := dst[ch*hw+oy*w:][:w]
				a, bb := r.a[ch], r.b[ch]
				for ox, tx := range xs {
					plane[ox] = float32(row[int(tx.i0)*c+ch]*a) + bb
				}
			}
			continue
		}
		r0, r1 := cache.get2(int(ty.i0), int(ty.i1))
		for ch := 0; ch < c; ch++ {
			plane := dst[ch*hw+oy*w:][:w]
			a, bb := r.a[ch], r.b[ch]
			for ox, tx := range xs {
				i0, i1 := int(tx.i0)*c+ch, int(tx.i1)*c+ch
				top := float32(tx.l0*r0[i0]) + float32(tx.l1*r0[i1])
				bot := float32(tx.l0*r1[i0]) + float32(tx.l1*r1[i1])
				v := float32(ty.l0*top) + float32(ty.l1*bot)
				plane[ox] = float32(v*a) + bb
			}
		}
	}
	return nil
}

// rowCache keeps the two most recently converted source rows, which is all
// a bilinear pass over increasing output rows needs.
type rowCache struct {
	src    *rowSource
	cols   []int32 // source columns to convert
	rowLen int     // len(cols) * channels
	y      [2]int
	buf    [2][]float32
}

func (rc *rowCache) init() {
	all := make([]float32, 2*rc.rowLen)
	rc.buf[0], rc.buf[1] = all[:rc.rowLen], all[rc.rowLen:]
	rc.y = [2]int{-1, -1}
}

func (rc *rowCache) find(y int) int {
	switch y {
	case rc.y[0]:
		return 0
	case rc.y[1]:
		return 1
	}
	return -1
}

// get2 returns converted rows y0 and y1 (which may be equal).
func (rc *rowCache) get2(y0, y1 int) ([]float32, []float32) {
	i0 := rc.find(y0)
	if i0 < 0 {
		i0 = 0
		if rc.find(y1) == 0 {
			i0 = 1
		}
		rc.src.fill(y0, rc.cols, rc.buf[i0])
		rc.y[i0] = y0
	}
	if y1 == y0 {
		return rc.buf[i0], rc.buf[i0]
	}
	i1 := rc.find(y1)
	if i1 < 0 {
		i1 = 1 - i0
		rc.src.fill(y1, rc.cols, rc.buf[i1])
		rc.y[i1] = y1
	}
	return rc.buf[i0], rc.buf[i1]
}
