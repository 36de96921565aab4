package imageprep

import (
	"errors"
	"image"
	"image/color"
	"strings"
	"testing"
)

func TestDecodeEachFormat(t *testing.T) {
	src := pattern(6, 4)
	pal := image.NewPaletted(src.Bounds(), color.Palette{color.Black, color.White, color.RGBA{255, 0, 0, 255}})
	for y := 0; y < 4; y++ {
		for x := 0; x < 6; x++ {
			pal.SetColorIndex(x, y, uint8((x+y)%3))
		}
	}
	cases := []struct {
		name, format string
		data         []byte
		w, h         int
	}{
		{"png", "png", encodePNG(t, src), 6, 4},
		{"jpeg", "jpeg", encodeJPEG(t, src, 90), 6, 4},
		{"gif", "gif", encodeGIF(t, pal), 6, 4},
		{"bmp", "bmp", encodeBMP(t, src), 6, 4},
		{"webp lossy", "webp", mustB64(t, webpLossyB64), 1, 1},
		{"webp lossless", "webp", mustB64(t, webpLosslessB64), 1, 1},
		{"webp alpha", "webp", mustB64(t, webpWithAlphaB64), 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img, format, err := Decode(tc.data, Limits{})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if format != tc.format {
				t.Errorf("format %q, want %q", format, tc.format)
			}
			if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
				t.Errorf("size %v, want %dx%d", b, tc.w, tc.h)
			}
			// Every decoded type must preprocess through its fast or generic path.
			dst := make([]float32, 3*5*5)
			if err := Preprocess(img, raw(5, 5, 3, "bilinear"), Options{}, dst); err != nil {
				t.Fatalf("Preprocess: %v", err)
			}
		})
	}
}

func TestDecodeLossless(t *testing.T) {
	src := pattern(7, 5)
	for name, data := range map[string][]byte{"png": encodePNG(t, src), "bmp": encodeBMP(t, src)} {
		img, _, err := Decode(data, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for y := 0; y < 5; y++ {
			for x := 0; x < 7; x++ {
				r0, g0, b0, _ := src.At(x, y).RGBA()
				r1, g1, b1, _ := img.At(x, y).RGBA()
				if r0 != r1 || g0 != g1 || b0 != b1 {
					t.Fatalf("%s: pixel (%d,%d) differs", name, x, y)
				}
			}
		}
	}
}

func TestDecodeTooLargeFromHeader(t *testing.T) {
	data := pngWithSize(t, 100000, 100000)
	// The file stops after IHDR: decoding pixels would fail with a
	// FormatError, so a TooLargeError shows the header was checked first.
	_, format, err := Decode(data, Limits{})
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("err = %v (%T), want *TooLargeError", err, err)
	}
	if format != "png" || tl.Width != 100000 || tl.Height != 100000 || tl.MaxPixels != DefaultMaxPixels {
		t.Errorf("got %+v format %q", tl, format)
	}
	if !strings.Contains(err.Error(), "downscale") {
		t.Errorf("message does not say how to fix: %v", err)
	}

	// Just over a custom limit; just under it passes the header check.
	if _, _, err := Decode(pngWithSize(t, 11, 10), Limits{MaxPixels: 100}); !errors.As(err, &tl) {
		t.Errorf("11x10 with MaxPixels 100: err = %v, want *TooLargeError", err)
	}
	var fe *FormatError
	if _, _, err := Decode(pngWithSize(t, 10, 10), Limits{MaxPixels: 100}); !errors.As(err, &fe) {
		t.Errorf("truncated 10x10 with MaxPixels 100: err = %v, want *FormatError", err)
	}
}

func TestDecodeTooManyBytes(t *testing.T) {
	data := encodePNG(t, pattern(8, 8))
	_, _, err := Decode(data, Limits{MaxBytes: 10})
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Bytes != int64(len(data)) || tl.MaxBytes != 10 {
		t.Fatalf("err = %v, want *TooLargeError for bytes", err)
	}
	if _, _, err := Decode(data, Limits{MaxBytes: -1}); err != nil {
		t.Fatalf("MaxBytes -1 (no cap): %v", err)
	}
}

func TestDecodeBadBytes(t *testing.T) {
	png := encodePNG(t, pattern(16, 16))
	jpg := encodeJPEG(t, pattern(16, 16), 90)
	cases := map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("this is not an image at all"),
		"truncated png":  png[:len(png)/2],
		"truncated jpeg": jpg[:len(jpg)/2],
		"png signature":  png[:8],
		"tiff header":    []byte("II*\x00\x08\x00\x00\x00"),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Decode(data, Limits{})
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v (%T), want *FormatError", err, err)
			}
			if fe.panicked {
				t.Fatalf("decoder panicked: %v", err)
			}
			for _, ct := range ContentTypes() {
				if !strings.Contains(err.Error(), ct) {
					t.Errorf("message %q does not list %s", err, ct)
				}
			}
		})
	}
}

func TestContentTypes(t *testing.T) {
	got := strings.Join(ContentTypes(), ",")
	if got != "image/png,image/jpeg,image/webp,image/gif,image/bmp" {
		t.Errorf("ContentTypes = %s", got)
	}
	ContentTypes()[0] = "changed"
	if ContentTypes()[0] != "image/png" {
		t.Error("ContentTypes shares its slice between calls")
	}
}
