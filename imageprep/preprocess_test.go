package imageprep

import (
	"errors"
	"image"
	"image/color"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

func run(t *testing.T, img image.Image, p engine.ImagePreprocessing, o Options) []float32 {
	t.Helper()
	shape := SampleShape(p, o)
	dst := make([]float32, engine.NumElements(shape))
	if err := Preprocess(img, p, o, dst); err != nil {
		t.Fatalf("Preprocess: %v", err)
	}
	return dst
}

// grayImage builds a Gray image from rows of values.
func grayImage(rows [][]uint8) *image.Gray {
	img := image.NewGray(image.Rect(0, 0, len(rows[0]), len(rows)))
	for y, row := range rows {
		copy(img.Pix[y*img.Stride:], row)
	}
	return img
}

func TestChannels(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	img.SetRGBA(0, 0, color.RGBA{10, 200, 30, 255})
	img.SetRGBA(1, 0, color.RGBA{255, 0, 0, 255})

	// RGB: planes R, G, B.
	assertNear(t, run(t, img, raw(1, 2, 3, "nearest"), Options{}), []float32{10, 255, 200, 0, 30, 0}, 0)
	// Grayscale: Pillow's convert("L") luminance, 124 and 76 for these pixels.
	assertNear(t, run(t, img, raw(1, 2, 1, "nearest"), Options{}), []float32{124, 76}, 0)
	// The generic At path agrees.
	assertNear(t, run(t, hide{img}, raw(1, 2, 1, "nearest"), Options{}), []float32{124, 76}, 0)

	// A gray source to RGB repeats the value in every channel.
	g := grayImage([][]uint8{{7, 250}})
	assertNear(t, run(t, g, raw(1, 2, 3, "nearest"), Options{}), []float32{7, 250, 7, 250, 7, 250}, 0)
	assertNear(t, run(t, g, raw(1, 2, 1, "nearest"), Options{}), []float32{7, 250}, 0)
}

func TestAlphaOverBlack(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 3, 1))
	img.SetNRGBA(0, 0, color.NRGBA{200, 100, 50, 128})
	img.SetNRGBA(1, 0, color.NRGBA{255, 255, 255, 0})
	img.SetNRGBA(2, 0, color.NRGBA{1, 2, 3, 255})
	got := run(t, img, raw(1, 3, 3, "nearest"), Options{})
	assertNear(t, got, []float32{100, 0, 1, 50, 0, 2, 25, 0, 3}, 0)
	assertNear(t, run(t, hide{img}, raw(1, 3, 3, "nearest"), Options{}), got, 1)
}

// TestFastPathsMatchGeneric checks every direct Pix reader against the
// generic At path, on images with odd offsets (SubImage) so the offset
// arithmetic is exercised.
func TestFastPathsMatchGeneric(t *testing.T) {
	src := pattern(13, 11)
	sub := image.Rect(1, 3, 12, 10) // 11x7, odd origin

	nrgba := image.NewNRGBA(src.Bounds())
	gray := image.NewGray(src.Bounds())
	pal := image.NewPaletted(src.Bounds(), color.Palette{color.Black, color.White, color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 0, 0}, color.NRGBA{0, 255, 0, 128}})
	for y := 0; y < 11; y++ {
		for x := 0; x < 13; x++ {
			c := src.RGBAAt(x, y)
			nrgba.SetNRGBA(x, y, color.NRGBA{c.R, c.G, c.B, uint8(x * 20)})
			gray.SetGray(x, y, color.Gray{uint8(x*19 + y*3)})
			pal.SetColorIndex(x, y, uint8((x*y)%5))
		}
	}
	images := map[string]image.Image{
		"rgba":     src.SubImage(sub),
		"nrgba":    nrgba.SubImage(sub),
		"gray":     gray.SubImage(sub),
		"paletted": pal.SubImage(sub),
	}
	ratios := map[string]image.YCbCrSubsampleRatio{
		"444": image.YCbCrSubsampleRatio444, "422": image.YCbCrSubsampleRatio422,
		"420": image.YCbCrSubsampleRatio420, "440": image.YCbCrSubsampleRatio440,
		"411": image.YCbCrSubsampleRatio411, "410": image.YCbCrSubsampleRatio410,
	}
	for name, ratio := range ratios {
		y := image.NewYCbCr(src.Bounds(), ratio)
		a := image.NewNYCbCrA(src.Bounds(), ratio)
		for i := range y.Y {
			y.Y[i] = uint8(i * 7)
		}
		for i := range y.Cb {
			y.Cb[i], y.Cr[i] = uint8(i*13), uint8(255-i*11)
		}
		copy(a.Y, y.Y)
		copy(a.Cb, y.Cb)
		copy(a.Cr, y.Cr)
		for i := range a.A {
			a.A[i] = uint8(i * 29)
		}
		images["ycbcr"+name] = y.SubImage(sub)
		images["nycbcra"+name] = a.SubImage(sub)

		// The YCbCr reader converts as libjpeg's jdcolor.c does (what Pillow
		// gives): Y + 1.402 Cr, Y - 0.34414 Cb - 0.71414 Cr, Y + 1.772 Cb in
		// 16-bit fixed point, each product rounded half up. A sub-image
		// (bounds not at 0,0) repeats chroma; python/tests/test_image_parity.py
		// checks the upsampling of whole images against Pillow.
		sy := y.SubImage(sub).(*image.YCbCr)
		got := run(t, sy, raw(sub.Dy(), sub.Dx(), 3, "nearest"), Options{})
		hw := sub.Dx() * sub.Dy()
		for yy := 0; yy < sub.Dy(); yy++ {
			for xx := 0; xx < sub.Dx(); xx++ {
				c := sy.YCbCrAt(sub.Min.X+xx, sub.Min.Y+yy)
				r, g, b := libjpegRGB(c.Y, c.Cb, c.Cr)
				i := yy*sub.Dx() + xx
				if got[i] != float32(r) || got[hw+i] != float32(g) || got[2*hw+i] != float32(b) {
					t.Fatalf("ycbcr %s pixel (%d,%d): got %v,%v,%v want %d,%d,%d", name, xx, yy, got[i], got[hw+i], got[2*hw+i], r, g, b)
				}
			}
		}
	}
	for name, img := range images {
		for _, c := range []int{1, 3} {
			for _, resize := range []string{"nearest", "bilinear"} {
				p := raw(9, 5, c, resize)
				fast := run(t, img, p, Options{})
				slow := run(t, hide{img}, p, Options{})
				// 8-bit rounding of YCbCr, alpha and luminance (three
				// roundings of up to half a level) differs from the
				// 16-bit At path by less than 1.5 levels.
				for i := range fast {
					if !near(fast[i], slow[i], 1.5) {
						t.Fatalf("%s c=%d %s: value %d fast %v generic %v", name, c, resize, i, fast[i], slow[i])
					}
				}
			}
		}
	}
}

// libjpegRGB is jdcolor.c's conversion written from its formulas: the
// constants FIX(x) = round(x * 65536), ONE_HALF = 32768, arithmetic shifts.
func libjpegRGB(y, cb, cr uint8) (int, int, int) {
	fix := func(x float64) int64 { return int64(math.Floor(x*65536 + 0.5)) }
	b, r := int64(cb)-128, int64(cr)-128
	clamp := func(v int64) int { return int(min(max(v, 0), 255)) }
	red := int64(y) + (fix(1.40200)*r+32768)>>16
	green := int64(y) + (-fix(0.34414)*b-fix(0.71414)*r+32768)>>16
	blue := int64(y) + (fix(1.77200)*b+32768)>>16
	return clamp(red), clamp(green), clamp(blue)
}

func TestNearest(t *testing.T) {
	img := grayImage([][]uint8{
		{0, 1, 2, 3},
		{10, 11, 12, 13},
		{20, 21, 22, 23},
		{30, 31, 32, 33},
	})
	// Downsample by 2: PyTorch mode='nearest' takes floor(d*2) = 0, 2.
	assertNear(t, run(t, img, raw(2, 2, 1, "nearest"), Options{}), []float32{0, 2, 20, 22}, 0)
	// 4 -> 3: floor(d*4/3) = 0, 1, 2.
	assertNear(t, run(t, img, raw(3, 3, 1, "nearest"), Options{}), []float32{0, 1, 2, 10, 11, 12, 20, 21, 22}, 0)
	// Same size: unchanged.
	assertNear(t, run(t, img, raw(4, 4, 1, "nearest"), Options{}), []float32{0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33}, 0)
	// Upsample 2x2 -> 4x4 repeats each pixel twice each way; 2 -> 3 gives 0, 0, 1.
	small := grayImage([][]uint8{{5, 6}, {7, 8}})
	assertNear(t, run(t, small, raw(4, 4, 1, "nearest"), Options{}), []float32{5, 5, 6, 6, 5, 5, 6, 6, 7, 7, 8, 8, 7, 7, 8, 8}, 0)
	assertNear(t, run(t, small, raw(1, 3, 1, "nearest"), Options{}), []float32{5, 5, 6}, 0)
}

func TestBilinear(t *testing.T) {
	// A constant picture stays constant at any size.
	c := image.NewRGBA(image.Rect(0, 0, 7, 5))
	for i := 0; i < len(c.Pix); i += 4 {
		c.Pix[i], c.Pix[i+1], c.Pix[i+2], c.Pix[i+3] = 77, 33, 201, 255
	}
	for _, size := range [][2]int{{13, 3}, {3, 11}, {1, 1}, {5, 7}, {64, 64}} {
		got := run(t, c, raw(size[0], size[1], 3, "bilinear"), Options{})
		n := size[0] * size[1]
		for i, v := range got {
			want := [3]float32{77, 33, 201}[i/n]
			if !near(v, want, 1e-4) {
				t.Fatalf("%v: value %d = %v, want %v", size, i, v, want)
			}
		}
	}

	// 2x2 -> 4x4 with align_corners=False: source coordinate
	// max((d+0.5)/2 - 0.5, 0) = 0, 0.25, 0.75, 1.25 (clamped to index 1), so
	// along one axis [a, b] becomes [a, .75a+.25b, .25a+.75b, b]; this is
	// F.interpolate(x, size=(4,4), mode="bilinear", align_corners=False).
	img := grayImage([][]uint8{{0, 40}, {80, 120}})
	assertNear(t, run(t, img, raw(4, 4, 1, "bilinear"), Options{}), []float32{
		0, 10, 30, 40,
		20, 30, 50, 60,
		60, 70, 90, 100,
		80, 90, 110, 120,
	}, 1e-4)

	// Downsample 5 -> 3: scale 5/3, source 1/3, 2, 11/3.
	row := grayImage([][]uint8{{0, 10, 20, 30, 40}})
	assertNear(t, run(t, row, raw(1, 3, 1, "bilinear"), Options{}), []float32{10.0 / 3, 20, 110.0 / 3}, 1e-4)

	// Same size is an exact copy; an empty Resize means bilinear.
	p := pattern(9, 6)
	assertNear(t, run(t, p, raw(6, 9, 3, ""), Options{}), run(t, p, raw(6, 9, 3, "nearest"), Options{}), 0)
}

func TestNormalise(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.SetRGBA(0, 0, color.RGBA{255, 0, 51, 255})
	mean, std := []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
	p := engine.ImagePreprocessing{Height: 1, Width: 1, Channels: 3, Mean: mean, Std: std} // Scale 0 = 1/255
	want := []float32{
		float32((1 - 0.485) / 0.229),
		float32((0 - 0.456) / 0.224),
		float32((0.2 - 0.406) / 0.225),
	}
	assertNear(t, run(t, img, p, Options{}), want, 1e-5)

	// One mean/std value applies to every channel; an explicit scale.
	p = engine.ImagePreprocessing{Height: 1, Width: 1, Channels: 3, Scale: 0.5, Mean: []float64{10}, Std: []float64{2}}
	assertNear(t, run(t, img, p, Options{}), []float32{(127.5 - 10) / 2, -5, (25.5 - 10) / 2}, 1e-5)

	// The digits recipe from docs/model-format.md: 0..255 -> 0..16.
	g := grayImage([][]uint8{{0, 255}})
	p = engine.ImagePreprocessing{Height: 1, Width: 2, Channels: 1, Scale: 0.0627450980, Mean: []float64{0}, Std: []float64{1}}
	assertNear(t, run(t, g, p, Options{}), []float32{0, 16}, 1e-5)

	// Three means for one channel is a recipe error that says how to fix it.
	p = engine.ImagePreprocessing{Height: 1, Width: 1, Channels: 1, Mean: mean}
	if err := Preprocess(g, p, Options{}, make([]float32, 1)); err == nil || !strings.Contains(err.Error(), "one per channel") {
		t.Errorf("mismatched mean: err = %v", err)
	}
	p = engine.ImagePreprocessing{Height: 1, Width: 1, Channels: 1, Std: []float64{0}}
	if err := Preprocess(g, p, Options{}, make([]float32, 1)); err == nil {
		t.Error("std 0 accepted")
	}
}

func TestInvert(t *testing.T) {
	g := grayImage([][]uint8{{0, 10, 255}})
	p := raw(1, 3, 1, "nearest")
	p.Invert = true
	assertNear(t, run(t, g, p, Options{}), []float32{255, 245, 0}, 0)
	// With scale, mean and std: ((255-v)/255 - 0.5) / 0.5.
	p.Scale, p.Mean, p.Std = 0, []float64{0.5}, []float64{0.5}
	assertNear(t, run(t, g, p, Options{}), []float32{1, float32((245.0/255 - 0.5) / 0.5), -1}, 1e-6)
	// The per-request override wins either way.
	no, yes := false, true
	assertNear(t, run(t, g, p, Options{Invert: &no}), []float32{-1, float32((10.0/255 - 0.5) / 0.5), 1}, 1e-6)
	q := raw(1, 3, 1, "nearest")
	assertNear(t, run(t, g, q, Options{Invert: &yes}), []float32{255, 245, 0}, 0)
}

func TestFlattenAndShape(t *testing.T) {
	p := raw(4, 5, 3, "bilinear")
	if got := SampleShape(p, Options{}); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Errorf("SampleShape = %v", got)
	}
	if got := SampleShape(p, Options{Height: 8, Width: 2, Channels: 1}); !slices.Equal(got, []int64{1, 8, 2}) {
		t.Errorf("SampleShape with options = %v", got)
	}
	f := p
	f.Flatten = true
	if got := SampleShape(f, Options{}); !slices.Equal(got, []int64{60}) {
		t.Errorf("flattened SampleShape = %v", got)
	}
	img := pattern(10, 7)
	assertNear(t, run(t, img, f, Options{}), run(t, img, p, Options{}), 0)

	data := encodePNG(t, img)
	bt, err := Batch([][]byte{data, data}, f, Options{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bt.Shape, []int64{2, 60}) || bt.DType != engine.Float32 {
		t.Errorf("batch %v %v", bt.DType, bt.Shape)
	}
}

func TestOptions(t *testing.T) {
	img := pattern(8, 8)
	p := raw(4, 4, 3, "bilinear")
	// Overrides change size, channels and resize mode.
	got := run(t, img, p, Options{Height: 2, Width: 3, Channels: 1, Resize: "nearest"})
	want := run(t, img, raw(2, 3, 1, "nearest"), Options{})
	assertNear(t, got, want, 0)

	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{Height: -1}, "height"},
		{Options{Width: -3}, "width"},
		{Options{Channels: 2}, "channels"},
		{Options{Resize: "bicubic"}, "resize"},
		{Options{Height: 1 << 14, Width: 1 << 14}, "height"},
		// Sides whose product overflows int64 (found by schemathesis:
		// height=2^62&width=4 wrapped to a small count and panicked in
		// makeslice).
		{Options{Height: math.MaxInt, Width: 2}, "height"},
		{Options{Height: 1 << 62, Width: 4}, "height"},
		{Options{Width: math.MaxInt}, "width"},
		{Options{Height: 2, Width: 1 << 40}, "width"},
	} {
		err := Preprocess(img, p, tc.o, make([]float32, 48))
		var oe *OptionsError
		if !errors.As(err, &oe) || oe.Field != tc.field {
			t.Errorf("%+v: err = %v, want *OptionsError for %s", tc.o, err, tc.field)
		}
		if _, err := Batch([][]byte{encodePNG(t, img)}, p, tc.o, Limits{}); !errors.As(err, &oe) {
			t.Errorf("Batch %+v: err = %v, want *OptionsError", tc.o, err)
		}
	}

	if err := Preprocess(img, p, Options{}, make([]float32, 47)); err == nil {
		t.Error("short dst accepted")
	}
	bad := p
	bad.Layout = "NHWC"
	if err := Preprocess(img, bad, Options{}, make([]float32, 48)); err == nil || !strings.Contains(err.Error(), "NCHW") {
		t.Errorf("NHWC layout: err = %v", err)
	}
	bad = p
	bad.Resize = "lanczos"
	if err := Preprocess(img, bad, Options{}, make([]float32, 48)); err == nil {
		t.Error("lanczos accepted")
	}
	if err := Preprocess(image.NewRGBA(image.Rectangle{}), p, Options{}, make([]float32, 48)); err == nil {
		t.Error("empty image accepted")
	}
}

func TestBatch(t *testing.T) {
	a, b := pattern(10, 12), pattern(30, 20)
	p := engine.ImagePreprocessing{Height: 6, Width: 5, Channels: 3, Resize: "bilinear", Mean: []float64{0.5}, Std: []float64{0.25}}
	bt, err := Batch([][]byte{encodePNG(t, a), encodeBMP(t, b)}, p, Options{}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bt.Shape, []int64{2, 3, 6, 5}) {
		t.Fatalf("shape %v", bt.Shape)
	}
	vals := bt.Float32s()
	assertNear(t, vals[:90], run(t, a, p, Options{}), 0)
	assertNear(t, vals[90:], run(t, b, p, Options{}), 0)

	good := encodePNG(t, a)
	_, err = Batch([][]byte{good, []byte("garbage"), good}, p, Options{}, Limits{})
	var be *BatchError
	var fe *FormatError
	if !errors.As(err, &be) || be.Index != 1 || !errors.As(err, &fe) || !strings.Contains(err.Error(), "image 1") {
		t.Errorf("bad image 1: err = %v", err)
	}
	_, err = Batch([][]byte{good, good, pngWithSize(t, 100000, 100000)}, p, Options{}, Limits{})
	var tl *TooLargeError
	if !errors.As(err, &be) || be.Index != 2 || !errors.As(err, &tl) {
		t.Errorf("huge image 2: err = %v", err)
	}
	if _, err := Batch(nil, p, Options{}, Limits{}); err == nil {
		t.Error("empty batch accepted")
	}
	// An override is bounded by the pixel limit like a source image is.
	var oe *OptionsError
	if _, err := Batch([][]byte{good}, p, Options{Height: 100, Width: 101}, Limits{MaxPixels: 10_000}); !errors.As(err, &oe) || oe.Field != "width" {
		t.Errorf("override over MaxPixels: err = %v, want *OptionsError for width", err)
	}
	if _, err := Batch([][]byte{good}, p, Options{Height: 100, Width: 100}, Limits{MaxPixels: 10_000}); err != nil {
		t.Errorf("override at MaxPixels: %v", err)
	}
}

func TestJPEGRoundTrip(t *testing.T) {
	// A JPEG of a smooth picture decodes close to the original.
	src := image.NewRGBA(image.Rect(0, 0, 32, 32))
	for y := 0; y < 32; y++ {
		for x := 0; x < 32; x++ {
			src.SetRGBA(x, y, color.RGBA{uint8(8 * x), uint8(8 * y), 128, 255})
		}
	}
	img, _, err := Decode(encodeJPEG(t, src, 100), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := run(t, img, raw(32, 32, 3, "nearest"), Options{})
	want := run(t, src, raw(32, 32, 3, "nearest"), Options{})
	var worst float64
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst > 10 { // 4:2:0 chroma subsampling costs a few levels on gradients
		t.Errorf("JPEG round trip off by up to %v levels", worst)
	}
}

func TestPreprocessAllocs(t *testing.T) {
	img, _, err := Decode(encodeJPEG(t, pattern(224, 224), 90), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	p := engine.ImagePreprocessing{Height: 224, Width: 224, Channels: 3, Resize: "bilinear", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}}
	dst := make([]float32, 3*224*224)
	allocs := testing.AllocsPerRun(10, func() {
		if err := Preprocess(img, p, Options{}, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Errorf("Preprocess makes %v allocations, want at most 4 (taps, rows, RGB scratch, chroma row)", allocs)
	}
}

// TestResizeMatchesReference compares the row-cached, column-compacted
// resize with a direct per-pixel evaluation of the same formulas, for many
// sizes up and down.
func TestResizeMatchesReference(t *testing.T) {
	seed := uint32(1)
	next := func() uint32 { seed = seed*1664525 + 1013904223; return seed >> 8 }
	for iter := 0; iter < 300; iter++ {
		sw, sh := int(next()%17)+1, int(next()%17)+1
		w, h := int(next()%23)+1, int(next()%23)+1
		img := image.NewGray(image.Rect(0, 0, sw, sh))
		for i := range img.Pix {
			img.Pix[i] = uint8(next())
		}
		for _, resize := range []string{"bilinear", "nearest"} {
			xs, ys := make([]tap, w), make([]tap, h)
			if resize == "nearest" {
				nearestTaps(sw, xs)
				nearestTaps(sh, ys)
			} else {
				bilinearTaps(sw, xs)
				bilinearTaps(sh, ys)
			}
			want := make([]float32, w*h)
			for oy, ty := range ys {
				for ox, tx := range xs {
					at := func(x, y int32) float32 { return float32(img.GrayAt(int(x), int(y)).Y) }
					top := float32(tx.l0*at(tx.i0, ty.i0)) + float32(tx.l1*at(tx.i1, ty.i0))
					bot := float32(tx.l0*at(tx.i0, ty.i1)) + float32(tx.l1*at(tx.i1, ty.i1))
					want[oy*w+ox] = float32(ty.l0*top) + float32(ty.l1*bot)
				}
			}
			got := run(t, img, raw(h, w, 1, resize), Options{})
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%dx%d -> %dx%d %s: value %d = %v, want %v", sw, sh, w, h, resize, i, got[i], want[i])
				}
			}
		}
	}
}
