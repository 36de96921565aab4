package imageprep

import (
	"errors"
	"image"
	"image/color"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// fuzzMaxInput caps fuzz inputs so each run stays fast.
const fuzzMaxInput = 1 << 20

// FuzzDecode feeds arbitrary bytes through Decode and Preprocess. Nothing may
// panic (a recovered decoder panic counts as a failure too), and every
// refusal must be a *FormatError or *TooLargeError.
func FuzzDecode(f *testing.F) {
	src := pattern(5, 4)
	pal := image.NewPaletted(src.Bounds(), color.Palette{color.Black, color.White, color.RGBA{0, 0, 255, 255}})
	for i := range pal.Pix {
		pal.Pix[i] = uint8(i % 3)
	}
	gray := image.NewGray(image.Rect(0, 0, 3, 2))
	nrgba := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	nrgba.SetNRGBA(1, 1, color.NRGBA{200, 10, 10, 100})
	f.Add(encodePNG(f, src))
	f.Add(encodePNG(f, gray))
	f.Add(encodePNG(f, nrgba))
	f.Add(encodePNG(f, pal))
	f.Add(encodeJPEG(f, src, 75))
	f.Add(encodeJPEG(f, gray, 75))
	f.Add(encodeGIF(f, pal))
	f.Add(encodeBMP(f, src))
	f.Add(mustB64(f, webpLossyB64))
	f.Add(mustB64(f, webpLosslessB64))
	f.Add(mustB64(f, webpWithAlphaB64))
	f.Add(pngWithSize(f, 100000, 100000))

	lim := Limits{MaxPixels: 1 << 16}
	rgb := engine.ImagePreprocessing{Height: 4, Width: 6, Channels: 3, Resize: "bilinear", Mean: []float64{0.5}, Std: []float64{0.25}}
	lum := engine.ImagePreprocessing{Height: 3, Width: 2, Channels: 1, Resize: "nearest", Invert: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzMaxInput {
			t.Skip()
		}
		img, _, err := Decode(data, lim)
		if err != nil {
			var fe *FormatError
			var tl *TooLargeError
			switch {
			case errors.As(err, &fe):
				if fe.panicked {
					t.Fatalf("decoder panicked: %v", err)
				}
			case errors.As(err, &tl):
			default:
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if b := img.Bounds(); int64(b.Dx())*int64(b.Dy()) > lim.MaxPixels {
			t.Fatalf("decoded %v, over the %d pixel limit", b, lim.MaxPixels)
		}
		for _, p := range []engine.ImagePreprocessing{rgb, lum} {
			dst := make([]float32, p.Channels*p.Height*p.Width)
			if err := Preprocess(img, p, Options{}, dst); err != nil {
				t.Fatalf("Preprocess of a decoded %T: %v", img, err)
			}
		}
	})
}

// BenchmarkPreprocessJPEG224 decodes a 224x224 RGB JPEG and preprocesses it
// to 3x224x224 with ImageNet normalisation, the common classifier request.
func BenchmarkPreprocessJPEG224(b *testing.B) {
	data := encodeJPEG(b, pattern(224, 224), 90)
	p := engine.ImagePreprocessing{Height: 224, Width: 224, Channels: 3, Layout: "NCHW", Resize: "bilinear",
		Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}}
	dst := make([]float32, 3*224*224)
	b.SetBytes(int64(len(data)))
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

// BenchmarkPreprocessOnly224 measures Preprocess alone on an already decoded
// 224x224 JPEG (same size: a copy with normalisation).
func BenchmarkPreprocessOnly224(b *testing.B) {
	img, _, err := Decode(encodeJPEG(b, pattern(224, 224), 90), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	p := engine.ImagePreprocessing{Height: 224, Width: 224, Channels: 3, Resize: "bilinear",
		Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}}
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		if err := Preprocess(img, p, Options{}, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResizeJPEG640To224 measures the bilinear downscale of a decoded
// 640x480 JPEG to 3x224x224.
func BenchmarkResizeJPEG640To224(b *testing.B) {
	img, _, err := Decode(encodeJPEG(b, pattern(640, 480), 90), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	p := engine.ImagePreprocessing{Height: 224, Width: 224, Channels: 3, Resize: "bilinear"}
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		if err := Preprocess(img, p, Options{}, dst); err != nil {
			b.Fatal(err)
		}
	}
}
