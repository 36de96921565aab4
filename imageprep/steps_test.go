package imageprep

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// goldenFile is testdata/golden.json (made by testdata/golden.py with
// Pillow and torchvision).
type goldenFile struct {
	Torch   string            `json:"torch"`
	Sources map[string]string `json:"sources"`
	Cases   []struct {
		Source  string                    `json:"source"`
		Name    string                    `json:"name"`
		Recipe  engine.ImagePreprocessing `json:"recipe"`
		WantHWC string                    `json:"want_hwc"`
	} `json:"cases"`
}

// TestStepsGolden runs every golden case through Decode and a compiled
// pipeline and compares with what Pillow and torchvision made, per pixel:
// the 8-bit picture before the float conversion must be identical (the
// float conversion of a recipe ending in to_tensor / to_dtype is v/255 or
// v*(1/255), which recovers it exactly).
func TestStepsGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 100 {
		t.Fatalf("only %d golden cases", len(g.Cases))
	}
	for _, c := range g.Cases {
		name := c.Source + ": " + c.Name
		img, _, err := Decode(mustB64(t, g.Sources[c.Source]), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pl, err := Compile(c.Recipe)
		if err != nil {
			t.Fatalf("%s: compile: %v", name, err)
		}
		r := c.Recipe
		dst := make([]float32, r.Channels*r.Height*r.Width)
		if err := pl.Preprocess(img, Options{}, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := mustB64(t, c.WantHWC)
		hw := r.Height * r.Width
		bad := 0
		for y := 0; y < r.Height; y++ {
			for x := 0; x < r.Width; x++ {
				for ch := 0; ch < r.Channels; ch++ {
					got := dst[ch*hw+y*r.Width+x] * 255
					w := want[(y*r.Width+x)*r.Channels+ch]
					if math.Abs(float64(got)-float64(w)) > 1e-3 {
						if bad < 3 {
							t.Errorf("%s: pixel (%d,%d) channel %d = %v, Pillow/torchvision %d", name, x, y, ch, got, w)
						}
						bad++
					}
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ", name, bad, len(dst))
		}
	}
}

func TestResizedSize(t *testing.T) {
	f := func(h, w int, size []int, maxSize, wantH, wantW int) {
		t.Helper()
		gh, gw := resizedSize(h, w, size, maxSize)
		if gh != wantH || gw != wantW {
			t.Errorf("resizedSize(%dx%d, %v, max %d) = %dx%d, want %dx%d", h, w, size, maxSize, gh, gw, wantH, wantW)
		}
	}
	f(480, 640, []int{256}, 0, 256, 341) // landscape: int(256*640/480) = 341
	f(640, 480, []int{256}, 0, 341, 256) // portrait
	f(500, 500, []int{224}, 0, 224, 224)
	f(11, 13, []int{256}, 0, 256, 302) // upscale, truncated 302.5
	f(480, 640, []int{256}, 300, 225, 300)
	f(480, 640, nil, 320, 240, 320) // size None, max_size only (v2)
	f(480, 640, []int{100, 50}, 0, 100, 50)
}

func TestCropOrigin(t *testing.T) {
	f := func(h, w, ch, cw, top, left int) {
		t.Helper()
		gt, gl := cropOrigin(h, w, ch, cw)
		if gt != top || gl != left {
			t.Errorf("cropOrigin(%dx%d -> %dx%d) = (%d,%d), want (%d,%d)", h, w, ch, cw, gt, gl, top, left)
		}
	}
	f(256, 341, 224, 224, 16, 58) // round(58.5) = 58: Python rounds half to even
	f(256, 343, 224, 224, 16, 60) // round(59.5) = 60
	f(10, 10, 14, 10, -2, 0)      // padded: 2 rows above, 2 below
	f(10, 10, 13, 12, -1, -1)     // odd padding: the smaller half first
	f(10, 20, 14, 8, -2, 6)       // padded one way, cropped the other
}

// TestStepsOptionsRefused: a transform is not overridden per request.
func TestStepsOptionsRefused(t *testing.T) {
	pl, err := Compile(stepsRecipe(8, 8, resizeStep([]int{8}, "bilinear", true), cropStep(8, 8)))
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, o := range []Options{{Height: 4}, {Width: 4}, {Channels: 1}, {Resize: "nearest"}, {Invert: &yes}} {
		_, err := pl.Batch([][]byte{encodePNG(t, pattern(9, 9))}, o, Limits{})
		var oe *OptionsError
		if !errors.As(err, &oe) || !strings.Contains(oe.Reason, "torchvision transform") {
			t.Errorf("%+v: got %v, want an OptionsError about the transform", o, err)
		}
	}
}

// TestStepsExtremeAspect: only the cropped window of a resize is computed,
// so a 4000x1 picture resized to a 256-pixel shorter side (1024000 wide)
// and cropped costs the crop; a chain that would keep such an intermediate
// is refused before allocating it.
func TestStepsExtremeAspect(t *testing.T) {
	wide := image.NewRGBA(image.Rect(0, 0, 4000, 1))
	for x := 0; x < 4000; x++ {
		wide.SetRGBA(x, 0, color.RGBA{uint8(x), uint8(x >> 4), 7, 255})
	}
	pl, err := Compile(stepsRecipe(224, 224, resizeStep([]int{256}, "bilinear", true), cropStep(224, 224)))
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 3*224*224)
	if err := pl.Preprocess(wide, Options{}, dst); err != nil {
		t.Fatalf("crop of a long picture: %v", err)
	}
	pl, err = Compile(stepsRecipe(224, 224, resizeStep([]int{256}, "bilinear", true), resizeStep([]int{224, 224}, "bilinear", true)))
	if err != nil {
		t.Fatal(err)
	}
	err = pl.Preprocess(wide, Options{}, dst)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a 1024000x256 intermediate picture: got %v, want a refusal", err)
	}
}

// TestStepsValidation: what engine.CheckSteps refuses, Compile refuses too.
func TestStepsValidation(t *testing.T) {
	bad := []engine.ImagePreprocessing{
		stepsRecipe(8, 8, resizeStep([]int{8}, "bilinear", true)),                                        // size depends on the picture
		stepsRecipe(8, 8, resizeStep([]int{8, 8}, "bilinear", false)),                                    // PIL always antialiases
		stepsRecipe(8, 8, resizeStep([]int{8, 8}, "cubic", true)),                                        // unknown filter
		stepsRecipe(9, 8, cropStep(8, 8)),                                                                // declared size disagrees
		stepsRecipe(8, 8, cropStep(8, 8), engine.ImageStep{Op: "sharpen"}),                               // unknown op
		stepsRecipe(8, 8, cropStep(1<<16, 8)),                                                            // over the side limit
		{Height: 8, Width: 8, Channels: 3, Steps: []engine.ImageStep{cropStep(8, 8), {Op: "to_tensor"}}}, // no convert first
	}
	for i, p := range bad {
		if _, err := Compile(p); err == nil {
			t.Errorf("case %d: compiled %+v", i, p.Steps)
		}
	}
}

// TestStepsJSONRefusesUnknownFields: a reader must not skip part of a step.
func TestStepsJSONRefusesUnknownFields(t *testing.T) {
	for _, doc := range []string{
		`{"op":"resize","size":[8],"interpolation":"bilinear","antialias":true,"sharpness":2}`,
		`{"op":"center_crop","size":[8,8],"mean":[0.5]}`,
		`{"op":"posterize","bits":4}`,
		`{"size":[8]}`,
	} {
		var s engine.ImageStep
		if err := json.Unmarshal([]byte(doc), &s); err == nil {
			t.Errorf("decoded %s", doc)
		}
	}
	var s engine.ImageStep
	if err := json.Unmarshal([]byte(`{"op":"resize","size":[8],"interpolation":"bilinear","antialias":true,"max_size":null}`), &s); err != nil {
		t.Errorf("a valid resize step: %v", err)
	}
}

func stepsRecipe(h, w int, body ...engine.ImageStep) engine.ImagePreprocessing {
	steps := append([]engine.ImageStep{{Op: "convert", Mode: "RGB"}}, body...)
	steps = append(steps, engine.ImageStep{Op: "to_tensor"},
		engine.ImageStep{Op: "normalize", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}})
	return engine.ImagePreprocessing{Height: h, Width: w, Channels: 3, Layout: "NCHW", Steps: steps}
}

func resizeStep(size []int, interp string, aa bool) engine.ImageStep {
	return engine.ImageStep{Op: "resize", Size: size, Interpolation: interp, Antialias: &aa}
}

func cropStep(h, w int) engine.ImageStep {
	return engine.ImageStep{Op: "center_crop", Size: []int{h, w}}
}

// TestStepsNormalizeExact: to_tensor then normalize equal PyTorch's float32
// (v/255 - mean)/std bit for bit (the lookup holds the same operations).
func TestStepsNormalizeExact(t *testing.T) {
	img := image.NewGray(image.Rect(0, 0, 256, 1))
	for x := range 256 {
		img.Pix[x] = uint8(x)
	}
	p := engine.ImagePreprocessing{Height: 1, Width: 256, Channels: 1, Steps: []engine.ImageStep{
		{Op: "convert", Mode: "L"}, {Op: "center_crop", Size: []int{1, 256}}, {Op: "to_tensor"}, {Op: "normalize", Mean: []float64{0.5}, Std: []float64{0.25}},
	}}
	dst := make([]float32, 256)
	if err := Preprocess(img, p, Options{}, dst); err != nil {
		t.Fatal(err)
	}
	for v := range 256 {
		want := float32(float32(v)/255-float32(0.5)) / float32(0.25)
		if dst[v] != want {
			t.Fatalf("value %d: %v, want %v", v, dst[v], want)
		}
	}
}

// BenchmarkStepsResNetJPEG640 decodes a 640x480 JPEG and runs torchvision's
// ImageNet eval transform (Resize(256), CenterCrop(224), ToTensor,
// Normalize) on it: the common classifier request with a camera picture.
func BenchmarkStepsResNetJPEG640(b *testing.B) {
	benchSteps(b, 640, 480, true)
}

// BenchmarkStepsResNetOnly640 is the same without the JPEG decoding.
func BenchmarkStepsResNetOnly640(b *testing.B) {
	benchSteps(b, 640, 480, false)
}

// BenchmarkStepsResNetJPEG224 is the transform on a 224x224 JPEG
// (upscaled to 256, then cropped).
func BenchmarkStepsResNetJPEG224(b *testing.B) {
	benchSteps(b, 224, 224, true)
}

func benchSteps(b *testing.B, w, h int, decode bool) {
	data := encodeJPEG(b, pattern(w, h), 90)
	pl, err := Compile(stepsRecipe(224, 224, resizeStep([]int{256}, "bilinear", true), cropStep(224, 224)))
	if err != nil {
		b.Fatal(err)
	}
	img, _, err := Decode(data, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		if decode {
			if img, _, err = Decode(data, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := pl.Preprocess(img, Options{}, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzImageSteps compiles arbitrary steps (what a hostile model file could
// carry) and runs the accepted ones on pictures of arbitrary small sizes:
// nothing may panic or allocate without bound; errors are fine.
func FuzzImageSteps(f *testing.F) {
	f.Add([]byte(`[{"op":"convert","mode":"RGB"},{"op":"resize","size":[256],"interpolation":"bilinear","antialias":true},{"op":"center_crop","size":[224,224]},{"op":"to_tensor"},{"op":"normalize","mean":[0.485,0.456,0.406],"std":[0.229,0.224,0.225]}]`), uint16(640), uint16(480))
	f.Add([]byte(`[{"op":"convert","mode":"RGB"},{"op":"to_image"},{"op":"resize","size":[7,300],"interpolation":"bicubic","antialias":false},{"op":"grayscale","channels":1},{"op":"to_dtype","dtype":"float32","scale":true}]`), uint16(3), uint16(200))
	f.Add([]byte(`[{"op":"convert","mode":"L"},{"op":"resize","size":[2],"max_size":3,"interpolation":"lanczos","antialias":true},{"op":"center_crop","size":[9,1]},{"op":"to_tensor"}]`), uint16(1), uint16(1000))
	f.Add([]byte(`[{"op":"convert","mode":"RGB"},{"op":"to_image"},{"op":"resize","interpolation":"nearest-exact","antialias":false,"max_size":5},{"op":"center_crop","size":[5,5]},{"op":"to_dtype","dtype":"float32","scale":true}]`), uint16(1), uint16(1))
	f.Fuzz(func(t *testing.T, doc []byte, w, h uint16) {
		if len(doc) > 4096 {
			t.Skip()
		}
		var steps []engine.ImageStep
		if json.Unmarshal(doc, &steps) != nil {
			return
		}
		p := engine.ImagePreprocessing{Layout: "NCHW", Steps: steps}
		sum, err := p.CheckSteps()
		if err != nil {
			return
		}
		p.Channels, p.Height, p.Width = sum.Channels, sum.Height, sum.Width
		if int64(p.Height)*int64(p.Width) > 1<<16 {
			return // keep each run small; the sizes themselves are checked above
		}
		pl, err := Compile(p)
		if err != nil {
			t.Fatalf("CheckSteps accepted what Compile refuses: %v", err)
		}
		sw, sh := int(w%2048)+1, int(h%2048)+1
		src := image.NewRGBA(image.Rect(0, 0, sw, sh))
		for i := range src.Pix {
			src.Pix[i] = uint8(i * 7)
		}
		dst := make([]float32, p.Channels*p.Height*p.Width)
		if err := pl.preprocess(src, Options{}, 1<<20, dst); err != nil && !strings.Contains(err.Error(), "imageprep:") {
			t.Fatalf("unexpected error %v", err)
		}
		for i, v := range dst {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("value %d is %v", i, v)
			}
		}
	})
}

// BenchmarkSimpleJPEG640 is the simple recipe ResNet-18 had before its eval
// transform (stretch to 224x224, bilinear without antialiasing, ImageNet
// normalisation) on the same 640x480 JPEG, decoding included: the "before"
// beside BenchmarkStepsResNetJPEG640.
func BenchmarkSimpleJPEG640(b *testing.B) {
	data := encodeJPEG(b, pattern(640, 480), 90)
	p := engine.ImagePreprocessing{Height: 224, Width: 224, Channels: 3, Layout: "NCHW", Resize: "bilinear",
		Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}}
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		img, _, err := Decode(data, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if err := Preprocess(img, p, Options{}, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPipelineConcurrentReuse: one compiled pipeline serving pictures of
// different sizes from several goroutines (its workspaces, coefficient
// caches included, are reused between them) gives what a fresh pipeline
// gives for each picture alone.
func TestPipelineConcurrentReuse(t *testing.T) {
	recipe := stepsRecipe(24, 24, resizeStep([]int{28}, "bicubic", true), cropStep(24, 24))
	pl, err := Compile(recipe)
	if err != nil {
		t.Fatal(err)
	}
	sizes := [][2]int{{64, 48}, {17, 90}, {28, 28}, {301, 97}, {24, 25}}
	want := make([][]float32, len(sizes))
	for i, s := range sizes {
		fresh, _ := Compile(recipe)
		want[i] = make([]float32, 3*24*24)
		if err := fresh.Preprocess(pattern(s[0], s[1]), Options{}, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			dst := make([]float32, 3*24*24)
			for r := 0; r < 30; r++ {
				i := (g + r) % len(sizes)
				if err := pl.Preprocess(pattern(sizes[i][0], sizes[i][1]), Options{}, dst); err != nil {
					errs <- err
					return
				}
				for j := range dst {
					if dst[j] != want[i][j] {
						errs <- fmt.Errorf("picture %v, value %d: %v, alone %v", sizes[i], j, dst[j], want[i][j])
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestStepsTapsBounded: a resize whose coefficients would take more than
// maxTaps (a huge downscale to a large output) is refused before they are
// allocated.
func TestStepsTapsBounded(t *testing.T) {
	var t0 axisTaps
	var scratch []float64
	err := computeTaps(tapKey{kernel: kernelPillow, filter: filterLanczos, in: 1 << 24, out: 1 << 15, n: 1 << 15}, &t0, &scratch)
	if err == nil || !strings.Contains(err.Error(), "too much work") {
		t.Fatalf("got %v, want a refusal", err)
	}
	if cap(t0.k) != 0 {
		t.Fatalf("allocated %d coefficients before refusing", cap(t0.k))
	}
	// The same downscale to a small crop window is fine.
	if err := computeTaps(tapKey{kernel: kernelPillow, filter: filterLanczos, in: 1 << 24, out: 1 << 15, o0: 100, n: 224}, &t0, &scratch); err != nil {
		t.Fatal(err)
	}
}

// TestStepsChainedResizeBounded: a resize feeding another resize needs the
// whole intermediate width; for a long picture that is refused before its
// coefficients or pixels are allocated.
func TestStepsChainedResizeBounded(t *testing.T) {
	long := image.NewGray(image.Rect(0, 0, 4_000_000, 1))
	p := engine.ImagePreprocessing{Height: 1, Width: 16000, Channels: 1, Steps: []engine.ImageStep{
		{Op: "convert", Mode: "L"},
		resizeStep([]int{256}, "bilinear", true), // 1024000000 x 256
		resizeStep([]int{1, 16000}, "box", true), // reads all of that width
		{Op: "to_tensor"},
	}}
	pl, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	err = pl.preprocess(long, Options{}, 1<<20, make([]float32, 16000))
	// Refused by the coefficient bound (the second resize reads 1024000000
	// columns) or the picture bound, whichever comes first; either before
	// allocating.
	if err == nil || !(strings.Contains(err.Error(), "too much work") || strings.Contains(err.Error(), "would compute")) {
		t.Fatalf("got %v, want the intermediate picture refused", err)
	}
}
